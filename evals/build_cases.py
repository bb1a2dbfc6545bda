# ruff: noqa: E501, RUF001
"""Writes evals/tool_calls.jsonl: hand-written tool-call cases (see router/commands/eval/cases.py for the format).

    python evals/build_cases.py        # rewrites tool_calls.jsonl next to this file

Every case is written out here, in plain data: nothing is fetched or generated at random.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


S = {"type": "string"}
N = {"type": "number"}
I = {"type": "integer"}  # noqa: E741

TOOLS = {
    "get_weather": fn("get_weather", "Current weather for a city", {"city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    "get_forecast": fn("get_forecast", "Weather forecast for a city for the next N days", {"city": S, "days": I}, ["city", "days"]),
    "read_file": fn("read_file", "Read a text file and return its contents", {"path": S}, ["path"]),
    "write_file": fn("write_file", "Write text to a file, replacing it", {"path": S, "content": S}, ["path", "content"]),
    "list_dir": fn("list_dir", "List the entries of a directory", {"path": S}, ["path"]),
    "delete_file": fn("delete_file", "Delete a file", {"path": S}, ["path"]),
    "run_shell": fn("run_shell", "Run a shell command and return its output", {"command": S}, ["command"]),
    "web_search": fn("web_search", "Search the web for a query", {"query": S}, ["query"]),
    "create_event": fn("create_event", "Create a calendar event", {"title": S, "date": {"type": "string", "description": "YYYY-MM-DD"}, "time": {"type": "string", "description": "HH:MM, 24h"}}, ["title", "date"]),
    "list_events": fn("list_events", "List calendar events on a date", {"date": {"type": "string", "description": "YYYY-MM-DD"}}, ["date"]),
    "send_email": fn("send_email", "Send an email", {"to": S, "subject": S, "body": S}, ["to", "subject"]),
    "search_email": fn("search_email", "Search the mailbox", {"query": S}, ["query"]),
    "calculate": fn("calculate", "Evaluate an arithmetic expression", {"expression": S}, ["expression"]),
    "convert_units": fn("convert_units", "Convert a value between units", {"value": N, "from_unit": S, "to_unit": S}, ["value", "from_unit", "to_unit"]),
    "convert_currency": fn("convert_currency", "Convert an amount between currencies (ISO codes)", {"amount": N, "from_currency": S, "to_currency": S}, ["amount", "from_currency", "to_currency"]),
    "set_timer": fn("set_timer", "Start a countdown timer", {"minutes": N}, ["minutes"]),
    "get_time": fn("get_time", "Current local time in a city or time zone", {"location": S}, ["location"]),
    "translate": fn("translate", "Translate text into a language", {"text": S, "target_language": S}, ["text", "target_language"]),
}

SETS = {
    "weather": ["get_weather", "get_forecast", "web_search"],
    "files": ["read_file", "write_file", "list_dir", "delete_file"],
    "shell": ["run_shell", "read_file", "web_search"],
    "search": ["web_search", "read_file", "calculate"],
    "calendar": ["create_event", "list_events", "send_email"],
    "email": ["send_email", "search_email", "create_event"],
    "math": ["calculate", "convert_units", "web_search"],
    "units": ["convert_units", "convert_currency", "calculate"],
    "many": ["get_weather", "read_file", "run_shell", "web_search", "create_event", "send_email", "calculate",
             "convert_units", "set_timer", "get_time", "translate"],
    "misc": ["set_timer", "get_time", "translate", "web_search"],
}


def ci(word: str) -> dict[str, str]:
    """Case-insensitive 'contains'."""
    return {"regex": "(?i)" + word}


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


CASES: list[tuple[str, str, str, list[dict[str, Any]] | str]] = [
    # (tag, tool set, user message, accepted answers | "text")
    ("weather", "weather", "What's the weather in Paris right now?", [call("get_weather", city=ci("paris"))]),
    ("weather", "weather", "Is it raining in London at the moment?", [call("get_weather", city=ci("london"))]),
    ("weather", "weather", "Current temperature in Tokyo in fahrenheit, please.", [call("get_weather", city=ci("tokyo"), unit="fahrenheit")]),
    ("weather", "weather", "How hot is it in Cairo today, in celsius?", [call("get_weather", city=ci("cairo"))]),
    ("weather", "weather", "Give me the 5-day forecast for Berlin.", [call("get_forecast", city=ci("berlin"), days=5)]),
    ("weather", "weather", "Forecast for Madrid for the next 3 days?", [call("get_forecast", city=ci("madrid"), days=3)]),
    ("weather", "weather", "Will it snow in Oslo this week? Check the 7 day forecast.", [call("get_forecast", city=ci("oslo"), days=7)]),
    ("weather", "weather", "weather sydney", [call("get_weather", city=ci("sydney"))]),
    ("weather", "weather", "Is it windy in Chicago right now?", [call("get_weather", city=ci("chicago"))]),
    ("weather", "weather", "Tomorrow's forecast for Lisbon (1 day).", [call("get_forecast", city=ci("lisbon"), days=1)]),
    ("weather", "weather", "What is the capital of France?", "text"),
    ("files", "files", "Show me the contents of README.md", [call("read_file", path={"regex": r"README\.md$"})]),
    ("files", "files", "Open /etc/hosts and show it to me.", [call("read_file", path="/etc/hosts")]),
    ("files", "files", "What files are in the src directory?", [call("list_dir", path={"regex": r"^(\./)?src/?$"})]),
    ("files", "files", "List everything in /tmp", [call("list_dir", path={"regex": r"^/tmp/?$"})]),
    ("files", "files", "Delete the file old.log", [call("delete_file", path={"regex": r"old\.log$"})]),
    ("files", "files", "Remove build/output.bin, it's stale.", [call("delete_file", path={"regex": r"build/output\.bin$"})]),
    ("files", "files", "Write 'hello world' to notes.txt", [call("write_file", path={"regex": r"notes\.txt$"}, content=ci("hello world"))]),
    ("files", "files", "Create a file todo.md containing '- buy milk'", [call("write_file", path={"regex": r"todo\.md$"}, content=ci("buy milk"))]),
    ("files", "files", "Read the config at config/settings.yaml", [call("read_file", path={"regex": r"config/settings\.yaml$"})]),
    ("files", "files", "What's in the current directory?", [call("list_dir", path={"one_of": [".", "./", "", "/"]})]),
    ("files", "files", "Print the file main.py", [call("read_file", path={"regex": r"main\.py$"})]),
    ("files", "files", "What does the word 'idempotent' mean?", "text"),
    ("shell", "shell", "Run `ls -la` in the shell.", [call("run_shell", command={"regex": r"^\s*ls -la\s*$"})]),
    ("shell", "shell", "Check the git status of this repo.", [call("run_shell", command={"regex": r"git status"})]),
    ("shell", "shell", "How much disk space is free? Use df -h.", [call("run_shell", command={"regex": r"df -h"})]),
    ("shell", "shell", "Run the test suite with pytest.", [call("run_shell", command={"regex": r"pytest"})]),
    ("shell", "shell", "Show the last 5 git commits (git log --oneline -5).", [call("run_shell", command={"regex": r"git log"})]),
    ("shell", "shell", "Which python version is installed? Run python --version.", [call("run_shell", command={"regex": r"python3? (--version|-V)"})]),
    ("shell", "shell", "Install the requests package with pip.", [call("run_shell", command={"regex": r"pip3? install .*requests"})]),
    ("shell", "shell", "Count the lines in app.py with wc.", [call("run_shell", command={"regex": r"wc -l .*app\.py"})]),
    ("shell", "shell", "Read the file setup.cfg", [call("read_file", path={"regex": r"setup\.cfg$"}), call("run_shell", command={"regex": r"cat .*setup\.cfg"})]),
    ("shell", "shell", "What does the ls command do in general?", "text"),
    ("search", "search", "Search the web for the latest Python release.", [call("web_search", query=ci("python"))]),
    ("search", "search", "Look up who won the 2018 World Cup.", [call("web_search", query=ci("world cup"))]),
    ("search", "search", "Find reviews of the Framework laptop online.", [call("web_search", query=ci("framework"))]),
    ("search", "search", "Google 'asyncio tutorial' for me.", [call("web_search", query=ci("asyncio"))]),
    ("search", "search", "Search for the population of Canada.", [call("web_search", query=ci("canada"))]),
    ("search", "search", "What is 12 times 7?", [call("calculate", expression={"regex": r"12\s*[*x×]\s*7"})]),
    ("search", "search", "Open notes/ideas.txt", [call("read_file", path={"regex": r"notes/ideas\.txt$"})]),
    ("search", "search", "Search online for rust borrow checker explanations", [call("web_search", query=ci("borrow"))]),
    ("search", "search", "Say hello!", "text"),
    ("search", "search", "Thanks, that's all for now.", "text"),
    ("calendar", "calendar", "Add a meeting called 'Standup' on 2025-03-10 at 09:30.", [call("create_event", title=ci("standup"), date="2025-03-10", time="09:30")]),
    ("calendar", "calendar", "Schedule 'Dentist' on 2025-04-02 at 14:00.", [call("create_event", title=ci("dentist"), date="2025-04-02", time="14:00")]),
    ("calendar", "calendar", "What's on my calendar on 2025-05-01?", [call("list_events", date="2025-05-01")]),
    ("calendar", "calendar", "Do I have anything on 2025-12-24?", [call("list_events", date="2025-12-24")]),
    ("calendar", "calendar", "Create an event 'Team lunch' for 2025-06-15.", [call("create_event", title=ci("lunch"), date="2025-06-15")]),
    ("calendar", "calendar", "Book 'Flight to Rome' on 2025-07-20 at 06:45", [call("create_event", title=ci("rome"), date="2025-07-20", time="06:45")]),
    ("calendar", "calendar", "Show my events for 2025-01-31", [call("list_events", date="2025-01-31")]),
    ("calendar", "calendar", "Email carol@example.com that the meeting moved, subject 'Meeting moved'.", [call("send_email", to="carol@example.com", subject=ci("moved"))]),
    ("calendar", "calendar", "How many days are in a leap year?", "text"),
    ("calendar", "calendar", "Put 'Pay rent' in the calendar on 2025-02-01 at 08:00", [call("create_event", title=ci("rent"), date="2025-02-01", time="08:00")]),
    ("email", "email", "Send an email to bob@example.com with subject 'Lunch' saying see you at noon.", [call("send_email", to="bob@example.com", subject=ci("lunch"))]),
    ("email", "email", "Email alice@example.org, subject 'Report', body 'Attached is the report'.", [call("send_email", to="alice@example.org", subject=ci("report"))]),
    ("email", "email", "Find emails about the invoice.", [call("search_email", query=ci("invoice"))]),
    ("email", "email", "Search my mailbox for messages from dave.", [call("search_email", query=ci("dave"))]),
    ("email", "email", "Write to team@example.com: subject 'Release', body 'v2 is out'.", [call("send_email", to="team@example.com", subject=ci("release"))]),
    ("email", "email", "Did I get any emails about the conference?", [call("search_email", query=ci("conference"))]),
    ("email", "email", "Send hr@example.com a note with subject 'Vacation' asking for Friday off.", [call("send_email", to="hr@example.com", subject=ci("vacation"))]),
    ("email", "email", "Look for the shipping confirmation email.", [call("search_email", query=ci("shipping"))]),
    ("email", "email", "Schedule 'Call with Eve' on 2025-09-09.", [call("create_event", title=ci("eve"), date="2025-09-09")]),
    ("email", "email", "What is a good subject line for a thank-you note?", "text"),
    ("math", "math", "Calculate 345 + 678.", [call("calculate", expression={"regex": r"345\s*\+\s*678"})]),
    ("math", "math", "What is 2 to the power of 10? Use the calculator.", [call("calculate", expression={"regex": r"2\s*(\*\*|\^)\s*10|pow\(2,\s*10\)"})]),
    ("math", "math", "Compute (15 - 3) / 4", [call("calculate", expression={"regex": r"\(?\s*15\s*-\s*3\s*\)?\s*/\s*4"})]),
    ("math", "math", "What's 18% of 250?", [call("calculate", expression={"regex": r"(0?\.18\s*\*\s*250|250\s*\*\s*0?\.18|18\s*%|18\s*/\s*100)"})]),
    ("math", "math", "Convert 10 kilometers to miles.", [call("convert_units", value=10, from_unit={"regex": "(?i)^k(ilo)?m"}, to_unit={"regex": "(?i)^mi"})]),
    ("math", "math", "How many feet is 3 meters?", [call("convert_units", value=3, from_unit={"regex": "(?i)^m(eter|etre)?s?$"}, to_unit={"regex": "(?i)^(f(ee|oo)?t)$"})]),
    ("math", "math", "Multiply 123 by 456.", [call("calculate", expression={"regex": r"123\s*[*x×]\s*456"})]),
    ("math", "math", "Square root of 144, please compute it.", [call("calculate", expression={"regex": r"sqrt\(\s*144\s*\)|144\s*\*\*\s*0?\.5"})]),
    ("math", "math", "Search the web for the Pythagorean theorem history.", [call("web_search", query=ci("pythag"))]),
    ("math", "math", "Is 7 a prime number? Just answer.", "text"),
    ("units", "units", "Convert 100 fahrenheit to celsius.", [call("convert_units", value=100, from_unit={"regex": "(?i)^f"}, to_unit={"regex": "(?i)^c"})]),
    ("units", "units", "How many grams is 2 pounds?", [call("convert_units", value=2, from_unit={"regex": "(?i)^(lb|pound)"}, to_unit={"regex": "(?i)^g"})]),
    ("units", "units", "Convert 5 liters to gallons.", [call("convert_units", value=5, from_unit={"regex": "(?i)^l"}, to_unit={"regex": "(?i)^gal"})]),
    ("units", "units", "Convert 50 USD to EUR.", [call("convert_currency", amount=50, from_currency={"regex": "(?i)^usd$"}, to_currency={"regex": "(?i)^eur$"})]),
    ("units", "units", "How much is 1000 yen in dollars?", [call("convert_currency", amount=1000, from_currency={"regex": "(?i)^jpy$"}, to_currency={"regex": "(?i)^usd$"})]),
    ("units", "units", "Change 20 GBP into CHF.", [call("convert_currency", amount=20, from_currency={"regex": "(?i)^gbp$"}, to_currency={"regex": "(?i)^chf$"})]),
    ("units", "units", "What's 26.2 miles in kilometers?", [call("convert_units", value=26.2, from_unit={"regex": "(?i)^mi"}, to_unit={"regex": "(?i)^k(ilo)?m"})]),
    ("units", "units", "Convert 3 hours to minutes.", [call("convert_units", value=3, from_unit={"regex": "(?i)^h"}, to_unit={"regex": "(?i)^min"})]),
    ("units", "units", "Add 17 and 25.", [call("calculate", expression={"regex": r"17\s*\+\s*25"})]),
    ("units", "units", "Convert 12 inches to centimeters.", [call("convert_units", value=12, from_unit={"regex": "(?i)^in"}, to_unit={"regex": "(?i)^c(enti)?m"})]),
    ("units", "units", "What unit is used to measure electrical resistance?", "text"),
    ("misc", "misc", "Set a timer for 10 minutes.", [call("set_timer", minutes=10)]),
    ("misc", "misc", "Start a 25 minute pomodoro timer.", [call("set_timer", minutes=25)]),
    ("misc", "misc", "Timer for half an hour please.", [call("set_timer", minutes=30)]),
    ("misc", "misc", "What time is it in New York?", [call("get_time", location={"regex": "(?i)new york|america/new_york|est|edt"})]),
    ("misc", "misc", "Current time in Singapore?", [call("get_time", location=ci("singapore"))]),
    ("misc", "misc", "Translate 'good morning' into Spanish.", [call("translate", text=ci("good morning"), target_language={"regex": "(?i)^(spanish|es|español)$"})]),
    ("misc", "misc", "How do you say 'thank you' in Japanese? Use the translator.", [call("translate", text=ci("thank you"), target_language={"regex": "(?i)^(japanese|ja|jp)$"})]),
    ("misc", "misc", "Translate 'where is the station' to German.", [call("translate", text=ci("station"), target_language={"regex": "(?i)^(german|de|deutsch)$"})]),
    ("misc", "misc", "Search the web for pomodoro technique tips.", [call("web_search", query=ci("pomodoro"))]),
    ("misc", "misc", "Tell me a short joke.", "text"),
    ("many", "many", "What's the weather in Rome?", [call("get_weather", city=ci("rome"))]),
    ("many", "many", "Read the file package.json", [call("read_file", path={"regex": r"package\.json$"}), call("run_shell", command={"regex": r"cat .*package\.json"})]),
    ("many", "many", "Run `make build`.", [call("run_shell", command={"regex": r"make build"})]),
    ("many", "many", "Search the web for llama.cpp benchmarks.", [call("web_search", query=ci("llama"))]),
    ("many", "many", "Create event 'Review' on 2025-08-08 at 16:00.", [call("create_event", title=ci("review"), date="2025-08-08", time="16:00")]),
    ("many", "many", "Email zoe@example.com subject 'Hi' body 'How are you?'", [call("send_email", to="zoe@example.com", subject=ci("hi"))]),
    ("many", "many", "What is 999 divided by 3?", [call("calculate", expression={"regex": r"999\s*/\s*3"})]),
    ("many", "many", "Convert 8 ounces to grams.", [call("convert_units", value=8, from_unit={"regex": "(?i)^(oz|ounce)"}, to_unit={"regex": "(?i)^g"})]),
    ("many", "many", "Set a 5 minute timer.", [call("set_timer", minutes=5)]),
    ("many", "many", "What time is it in London?", [call("get_time", location={"regex": "(?i)london|europe/london|gmt|bst"})]),
    ("many", "many", "Translate 'cheese' into French.", [call("translate", text=ci("cheese"), target_language={"regex": "(?i)^(french|fr|français)$"})]),
    ("many", "many", "Is it sunny in Athens?", [call("get_weather", city=ci("athens"))]),
    ("many", "many", "Show the output of `uname -a`.", [call("run_shell", command={"regex": r"uname -a"})]),
    ("many", "many", "Who wrote Hamlet? Answer from memory.", "text"),
    ("many", "many", "Write a haiku about autumn.", "text"),
    ("many", "many", "Hi there, how are you?", "text"),
]


def build() -> list[dict[str, Any]]:
    out = []
    counts: dict[str, int] = {}
    for tag, tool_set, question, accept in CASES:
        counts[tag] = counts.get(tag, 0) + 1
        case: dict[str, Any] = {
            "id": f"{tag}-{counts[tag]:02d}",
            "tags": [tag, "no_call" if accept == "text" else "call"],
            "messages": [{"role": "user", "content": question}],
            "tools": [TOOLS[name] for name in SETS[tool_set]],
            "accept": accept,
        }
        out.append(case)
    return out


if __name__ == "__main__":
    cases = build()
    path = Path(__file__).with_name("tool_calls.jsonl")
    path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases))
    print(f"{len(cases)} cases -> {path}")
