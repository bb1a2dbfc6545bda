"""`Strict`: the base of every policy model (router/policy/model.py, route.py): an unknown key is
an error (`extra="forbid"`) and a loaded policy is frozen. `PositiveFloat`: their seconds and sizes."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveFloat = Annotated[float, Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
