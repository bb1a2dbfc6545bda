"""The tasks: a prompt, the tools offered, exact checks of the end state and the final answer, and
two scripted runs — a correct one (every check passes) and a near miss (some check fails), which
tests/bench/test_agentic.py plays through the Environment so that no checker is vacuous.

Kinds (a task has one or more):
    chain         a call needs what an earlier call returned
    recovery      a call the prompt leads to fails (a wrong path, an ambiguous name, a bad date
                  format, …); the agent must notice and find the right way
    no_tool       no tool is needed (and nothing may change)
    many_tools    all 30 tools are offered
    long_context  a big file to read (/logs/app.log ≈ 27k characters, /docs/handbook.md ≈ 15k) or a
                  long conversation before the question (≈ 21k characters)

Levels (a guess, to be checked against the runs): 1 a 0.5B model may well do it, 2 within a 1.5B
model's reach, 3 probably beyond it (many steps, an inference across results, a long context).

A scripted step may say `fails=True` (the Environment answers "Error: …": a recovery task's wrong
turn) and `shows=(...)`: strings its output contains, so an expected number is tied to the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.agentic import world
from bench.agentic.checks import (
    Answer,
    Check,
    Closed,
    Event,
    EventCount,
    File,
    Issue,
    IssueCount,
    NoEvent,
    NoFile,
    NoIssue,
    NoToolCalls,
    NotSent,
    Number,
    Sent,
    SentCount,
    Unchanged,
    dates,
    times,
)
from bench.agentic.env import tools_of

KINDS = ("chain", "recovery", "no_tool", "many_tools", "long_context")
SYSTEM = (
    f"You are a helpful assistant working in a sandbox: a small file tree, a calendar, contacts, messages, "
    f"an issue tracker and other tools. Today is {world.WEEKDAY} {world.TODAY}. Use the tools when the task "
    "needs them, one step at a time, and use what a tool returned in the next call. If a tool returns an "
    "error, find out why and try another way. When the task is done, reply with a short final answer that "
    "states the result."
)


@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, Any]
    fails: bool = False
    shows: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """A scripted run: tool calls in order, then the final answer."""

    steps: tuple[Step, ...]
    answer: str


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    kinds: tuple[str, ...]
    tools: tuple[str, ...]
    checks: tuple[Check, ...]
    solution: Run
    wrong: Run
    level: int
    history: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (role, text) before the prompt


def step(tool: str, *, fails: bool = False, shows: tuple[str, ...] | str = (), **args: Any) -> Step:
    return Step(tool, args, fails, (shows,) if isinstance(shows, str) else shows)


def run(*steps: Step, answer: str) -> Run:
    return Run(steps, answer)


# --- a long conversation, before the long-history tasks' prompt -------------------------------------

_TOPICS = (
    ("the agenda", "a morning of talks and an afternoon of workshops"),
    ("the invitations", "a short email with a calendar link"),
    ("dietary needs", "a vegetarian and a vegan option, and one nut allergy"),
    ("the workshops", "three rooms of about ten people each"),
    ("travel", "most people come by train; two fly in from Lisbon"),
    ("the photographer", "optional, only if the budget allows it"),
    ("the slides", "one template for every talk, due a week before"),
    ("the schedule", "a break every ninety minutes"),
    ("name badges", "printed on site, first names large"),
    ("the feedback form", "five questions, sent the day after"),
)
FACTS = {
    3: "Our budget cap for the whole offsite is 2,400 EUR, nothing above that.",
    9: "The catering quote came in: 1,150 EUR for lunch and coffee breaks.",
    14: "The AV company quoted 420 EUR for projectors and microphones.",
    19: "I booked the venue: the booking reference is QX-7731, and the venue quote is 980 EUR.",
    25: "The offsite is on 2025-03-21, starting at 13:00.",
}
HISTORY_TURNS = 36


def _history() -> tuple[tuple[str, str], ...]:
    turns: list[tuple[str, str]] = []
    for n in range(HISTORY_TURNS):
        topic, detail = _TOPICS[n % len(_TOPICS)]
        user = (f"Next point for the team offsite, number {n + 1}: {topic}. I was thinking of {detail}. "
                f"What do you think, and is there anything I should keep in mind about {topic}? "
                "Please keep it short, I have a lot of points to go through today.")  # fmt: skip
        if n in FACTS:
            user = f"{FACTS[n]} {user}"
        assistant = (f"Noted on {topic}: {detail} sounds reasonable. Keep the attendees informed early, write "
                     f"the decision down in the planning document, and check {topic} again a week before the "
                     "offsite so that nothing is forgotten. Anything else on this point?")  # fmt: skip
        turns += [("user", user), ("assistant", assistant)]
    return tuple(turns)


HISTORY = _history()

# --- the tasks ---------------------------------------------------------------------------------------

LOG = world.log_facts()
ALL = tools_of("all")
_FILES = tools_of("files")
_SALES_NORTH = "120 + 140 + 110"


def _tasks() -> list[Task]:
    # fmt: off
    t: list[Task] = []

    def add(id: str, prompt: str, kinds: tuple[str, ...], tools: tuple[str, ...], checks: tuple[Check, ...],
            solution: Run, wrong: Run, level: int, history: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
        t.append(Task(id, prompt, kinds, tools, checks, solution, wrong, level, history))

    # --- no tool needed ------------------------------------------------------------------------------
    add("nt-capital", "What is the capital of France? Answer with the city only.", ("no_tool",),
        tools_of("files", "misc"), (Answer(all=("paris",)), Unchanged()),
        run(answer="Paris"), run(answer="Lyon"), 1)
    add("nt-minutes", "How many minutes are there in 3 hours? Reply with the number only.", ("no_tool",),
        tools_of("calc", "misc"), (Number(180), Unchanged()), run(answer="180"), run(answer="120"), 1)
    add("nt-hola", "How do you say 'hello' in Spanish? One word.", ("no_tool",), tools_of("misc", "messages"),
        (Answer(all=("hola",)), Unchanged()), run(answer="Hola"), run(answer="Bonjour"), 1)
    add("nt-http", "What does the abbreviation HTTP stand for? One line.", ("no_tool",), tools_of("files", "shell"),
        (Answer(all=("hypertext transfer protocol",)), Unchanged()),
        run(answer="HyperText Transfer Protocol"), run(answer="High Throughput Transfer Process"), 1)
    add("nt-dont-send",
        "I'm thinking aloud: I should message Maria about lunch at some point. Don't send anything now and "
        "don't change anything, just reply with the word OK.", ("no_tool",),
        tools_of("contacts", "messages", "calendar"),
        (Answer(all=("ok",)), Unchanged()),
        run(answer="OK"), run(step("send_message", to="@maria", text="Lunch some day?"), answer="OK"), 2)
    add("nt-leap", "How many days does a leap year have? Reply with the number.", ("no_tool",), tools_of("calendar"),
        (Number(366), Unchanged()), run(answer="366"), run(answer="365"), 1)
    add("nt-reverse", "Spell the word 'router' backwards, letters only.", ("no_tool",), tools_of("files", "calc"),
        (Answer(all=("retuor",)), Unchanged()), run(answer="retuor"), run(answer="rotuer"), 3)
    add("nt-boarding",
        "My flight leaves at 14:50 and boarding starts 40 minutes before that. When does boarding start? "
        "Answer as HH:MM.", ("no_tool",), tools_of("calc", "calendar"),
        (Answer(any=("14:10", "2:10 pm", "2:10pm")), Unchanged()), run(answer="14:10"), run(answer="14:20"), 2)
    add("nt-many-sum", "Without using any tool: what is 7 + 5?", ("no_tool", "many_tools"), ALL,
        (Number(12), NoToolCalls()), run(answer="12"), run(step("calculate", expression="7 + 5"), answer="12"), 1)
    add("nt-many-name",
        "Which one of your tools prints a whole file? Just tell me its name, don't call it.",
        ("no_tool", "many_tools"), ALL, (Answer(all=("cat",)), NoToolCalls()),
        run(answer="cat"), run(step("cat", path="/README.md"), answer="cat"), 2)

    # --- chains ---------------------------------------------------------------------------------------
    add("ch-port", "Which port is set in /src/config.yaml?", ("chain",), _FILES, (Number(8443),),
        run(step("cat", path="/src/config.yaml", shows="port: 8443"), answer="Port 8443."),
        run(step("cat", path="/src/config.yaml"), answer="Port 8080."), 1)
    add("ch-version", "Which version does /src/app.py declare?", ("chain",), _FILES, (Answer(all=("2.4.1",)),),
        run(step("cat", path="/src/app.py", shows='VERSION = "2.4.1"'), answer="2.4.1"),
        run(step("cat", path="/src/app.py"), answer="2.4.0"), 1)
    add("ch-sales-north", "Using /data/sales-q1.csv, how many units did the north region sell in Q1 in total?",
        ("chain",), tools_of("files", "calc"), (Number(370),),
        run(step("cat", path="/data/sales-q1.csv",
                 shows=("2025-01,north,120", "2025-02,north,140", "2025-03,north,110")),
            step("calculate", expression=_SALES_NORTH, shows="370"), answer="370 units."),
        run(step("cat", path="/data/sales-q1.csv"), answer="360 units."), 2)
    add("ch-maria-request", "Read the message Maria sent me and do what she asks.", ("chain",),
        tools_of("messages", "contacts", "files", "calc"), (Sent("@maria", all=("370",)), SentCount(1)),
        run(step("list_messages", shows="m1"), step("read_message", message_id="m1", shows="north region"),
            step("cat", path="/data/sales-q1.csv"), step("calculate", expression=_SALES_NORTH, shows="370"),
            step("send_message", to="@maria", text="Hi Maria, the north region sold 370 units in Q1."),
            answer="I sent Maria the Q1 total for the north region: 370 units."),
        run(step("read_message", message_id="m1"), step("send_message", to="@maria", text="875 units in Q1."),
            answer="Sent: 875 units."), 3)
    add("ch-lee-question", "Lee Park asked me something by message. Find it and answer his question by message.",
        ("chain",), tools_of("messages", "contacts", "files"),
        (Sent("@lee.park", all=("staging-3.falcon.internal",)), SentCount(1)),
        run(step("list_messages", shows="m3"), step("read_message", message_id="m3", shows="staging server"),
            step("grep", pattern="staging", path="/docs", shows="staging-3.falcon.internal"),
            step("send_message", to="@lee.park", text="The staging server is staging-3.falcon.internal."),
            answer="I told Lee Park the staging host: staging-3.falcon.internal."),
        run(step("send_message", to="@lchen", text="The staging server is staging-3.falcon.internal."),
            answer="Done."), 2)
    add("ch-retro", "Priya sent me a request about the retro. Please do it.", ("chain",),
        tools_of("messages", "calendar", "contacts"),
        (Event("2025-03-14", "11:00", ("retro",), 45, ("@ana", "@tom")), EventCount(7)),
        run(step("list_messages", shows="Retro"), step("read_message", message_id="m5", shows="45 minutes"),
            step("create_event", title="Retro", date="2025-03-14", start="11:00", duration_minutes=45,
                 attendees=["@ana", "@tom"]),
            answer="The retro is booked on Friday 2025-03-14, 11:00-11:45, with Ana and Tom."),
        run(step("create_event", title="Retro", date="2025-03-14", start="11:00", attendees=["@ana", "@tom"]),
            answer="Booked."), 3)
    add("ch-next-meeting", "When is the next team meeting, according to my notes in /notes? Give the date and time.",
        ("chain",), _FILES, (Answer(any=dates("2025-03-12")), Answer(any=times("15:00"))),
        run(step("ls", path="/notes", shows="meeting-2025-03-07.md"),
            step("cat", path="/notes/meeting-2025-03-07.md", shows="2025-03-12 at 15:00"),
            answer="Wednesday 2025-03-12 at 15:00."),
        run(step("ls", path="/notes"), answer="Friday 2025-03-07 at 15:00."), 1)
    add("ch-assignee-ping",
        "Who is assigned to issue #3? Send them a message asking for a status update on that issue.", ("chain",),
        tools_of("issues", "messages", "contacts"), (Sent("@ana", any=("#3", "issue 3", "login")), SentCount(1)),
        run(step("get_issue", issue_id=3, shows="assignee=@ana"),
            step("send_message", to="@ana", text="Hi Ana, any update on issue #3 (login fails with an expired token)?"),
            answer="Ana is assigned; I asked her for an update on #3."),
        run(step("get_issue", issue_id=3), step("send_message", to="@tom", text="Any update on issue #3?"),
            answer="Asked Tom."), 2)
    add("ch-unassigned-bugs", "How many open issues labelled bug have no assignee? Reply with the number.",
        ("chain",), tools_of("issues"), (Number(2), Unchanged()),
        run(step("list_issues", status="open", label="bug", shows=("#4", "#8")), answer="2 (#4 and #8)."),
        run(step("list_issues", status="open", label="bug"), answer="3"), 2)
    add("ch-close-6", "Issue #6 is done: close it and add the comment 'Documented in docs/deploy.md'.", ("chain",),
        tools_of("issues"), (Issue(6, status="closed", comment=("documented in docs/deploy.md",)), IssueCount(8)),
        run(step("update_issue", issue_id=6, status="closed"),
            step("comment_issue", issue_id=6, text="Documented in docs/deploy.md"),
            answer="Closed #6 with the comment."),
        run(step("update_issue", issue_id=6, status="closed"), answer="Closed #6."), 1)
    add("ch-reorder-list", "Which items in /data/inventory.csv are below their reorder level?", ("chain",), _FILES,
        (Answer(all=("widget", "sprocket", "doohickey"), none=("gadget", "gizmo")),),
        run(step("cat", path="/data/inventory.csv", shows="sprocket,8,20"), answer="widget, sprocket and doohickey."),
        run(step("cat", path="/data/inventory.csv"), answer="widget and sprocket."), 2)
    add("ch-reorder-issues",
        "For every item in /data/inventory.csv whose count is below its reorder level, open an issue titled "
        "'Reorder <item>' with the label ops.", ("chain",), tools_of("files", "issues"),
        (Issue(title=("reorder widget",), label="ops"), Issue(title=("reorder sprocket",), label="ops"),
         Issue(title=("reorder doohickey",), label="ops"), NoIssue(("reorder gadget", "reorder gizmo")),
         IssueCount(11)),
        run(step("cat", path="/data/inventory.csv"),
            step("create_issue", title="Reorder widget", labels=["ops"]),
            step("create_issue", title="Reorder sprocket", labels=["ops"]),
            step("create_issue", title="Reorder doohickey", labels=["ops"]), answer="Opened #9, #10 and #11."),
        run(step("cat", path="/data/inventory.csv"), step("create_issue", title="Reorder widget", labels=["ops"]),
            step("create_issue", title="Reorder sprocket", labels=["ops"]), answer="Opened two issues."), 3)
    add("ch-busy", "Am I free on Tuesday 2025-03-11 at 11:15? If not, what is on my calendar then?", ("chain",),
        tools_of("calendar"), (Answer(any=("1:1", "priya")), Unchanged()),
        run(step("list_events", date="2025-03-11", shows="1:1 with Priya"), answer="No: 1:1 with Priya, 11:00-11:30."),
        run(step("list_events", date="2025-03-12"), answer="Yes, you are free."), 1)
    add("ch-move-lunch", "Move my lunch with Maria on Friday one hour later, keeping its length.", ("chain",),
        tools_of("calendar", "contacts"),
        (Event("2025-03-14", "13:00", ("lunch",), 60), NoEvent(("lunch",), "2025-03-14", "12:00"), EventCount(6)),
        run(step("list_events", date="2025-03-14", shows="ev-6"), step("delete_event", event_id="ev-6"),
            step("create_event", title="Lunch with Maria", date="2025-03-14", start="13:00", duration_minutes=60,
                 attendees=["@maria"]), answer="Lunch with Maria is now on Friday 13:00-14:00."),
        run(step("create_event", title="Lunch with Maria", date="2025-03-14", start="13:00"), answer="Moved."), 3)
    add("ch-warmer", "Which is warmer right now, Lisbon or Oslo, and by how many degrees Celsius?", ("chain",),
        tools_of("misc", "calc"), (Answer(all=("lisbon",)), Number(18)),
        run(step("get_weather", city="Lisbon", shows="19"), step("get_weather", city="Oslo", shows="1 °C"),
            answer="Lisbon, by 18 degrees (19 °C against 1 °C)."),
        run(step("get_weather", city="Lisbon"), answer="Lisbon, by 17 degrees."), 2)
    add("ch-budget-fx", "Convert 2,400 EUR to US dollars and to British pounds.", ("chain",), tools_of("misc", "calc"),
        (Number(2592), Number(2016)),
        run(step("convert_currency", amount=2400, from_currency="EUR", to_currency="USD", shows="2592.00"),
            step("convert_currency", amount=2400, from_currency="EUR", to_currency="GBP", shows="2016.00"),
            answer="2,400 EUR = 2,592.00 USD = 2,016.00 GBP."),
        run(step("convert_currency", amount=2400, from_currency="EUR", to_currency="USD"),
            answer="2592 USD and 2000 GBP."), 2)
    add("ch-todo-append",
        "Add 'call the plumber' as a new item at the end of /notes/todo.txt, in the same format as the other items.",
        ("chain",), tools_of("files", "write"),
        (File("/notes/todo.txt", all=("- renew tls certificate", "- water the plants"), last="- call the plumber"),),
        run(step("cat", path="/notes/todo.txt", shows="- water the plants"),
            step("append_file", path="/notes/todo.txt", content="- call the plumber\n"), answer="Added."),
        run(step("write_file", path="/notes/todo.txt", content="- call the plumber\n"), answer="Added."), 1)
    add("ch-due-event",
        "One item on my todo list (/notes/todo.txt) has a due date. Put it in my calendar on that date at 09:00 "
        "for 30 minutes.", ("chain",), tools_of("files", "calendar"),
        (Event("2025-03-14", "09:00", ("tls", "certificate"), 30), EventCount(7)),
        run(step("cat", path="/notes/todo.txt", shows="due 2025-03-14"),
            step("create_event", title="Renew TLS certificate", date="2025-03-14", start="09:00", duration_minutes=30),
            answer="Added 'Renew TLS certificate' on 2025-03-14 at 09:00."),
        run(step("create_event", title="Renew TLS certificate", date="2025-03-13", start="09:00", duration_minutes=30),
            answer="Added."), 2)
    add("ch-shopping-count", "How many items are on my shopping list, /notes/shopping.txt?", ("chain",), _FILES,
        (Number(4),), run(step("wc", path="/notes/shopping.txt", shows="4 lines"), answer="4 items."),
        run(step("cat", path="/notes/shopping.txt"), answer="5 items."), 1)
    add("ch-deploy-failed", "Look in /logs: which version failed to deploy to production, and what was done about it?",
        ("chain",), _FILES,
        (Answer(all=("2.4.1",), any=("rollback", "rolled back", "roll back", "rolled production back")),),
        run(step("ls", path="/logs", shows="deploy.log"), step("cat", path="/logs/deploy.log", shows="FAILED"),
            answer="2.4.1 failed its health check; production was rolled back to 2.4.0 (rollback at 10:05)."),
        run(step("ls", path="/logs"), answer="Version 2.4.0 failed; nothing was done."), 2)
    add("ch-deploy-issue",
        "Open an issue about the failed production deploy in /logs/deploy.log: its title must contain the version, "
        "label it bug, and assign it to the person on call named in /README.md.", ("chain",),
        tools_of("files", "issues", "contacts"),
        (Issue(title=("2.4.1",), status="open", label="bug", assignee="@tom"), IssueCount(9)),
        run(step("cat", path="/logs/deploy.log", shows="2.4.1 to production: FAILED"),
            step("cat", path="/README.md", shows="On call this week: Tom Becker (@tom)"),
            step("create_issue", title="Production deploy of 2.4.1 failed", labels=["bug"]),
            step("update_issue", issue_id=9, assignee="@tom"), answer="Opened #9 and assigned it to Tom."),
        run(step("create_issue", title="Production deploy of 2.4.1 failed", labels=["bug"]),
            step("update_issue", issue_id=9, assignee="@ana"), answer="Opened #9 for Ana."), 3)
    add("ch-release-support",
        "The release checklist in /docs says to tell support the release date. The date is in my meeting notes in "
        "/notes. Send support that message.", ("chain",), tools_of("files", "messages", "contacts"),
        (Sent("@julia", any=dates("2025-03-20")), SentCount(1)),
        run(step("cat", path="/docs/release-checklist.md", shows="@julia"), step("ls", path="/notes"),
            step("cat", path="/notes/meeting-2025-03-07.md", shows="2025-03-20"),
            step("send_message", to="@julia", text="Release 2.5 is planned for Thursday 2025-03-20."),
            answer="Told Julia (support): release on 2025-03-20."),
        run(step("send_message", to="@julia", text="The release is on 2025-03-12."), answer="Done."), 3)
    add("ch-todos-src", "How many TODO comments are there in the files under /src?", ("chain",), _FILES,
        (Number(2), Unchanged()),
        run(step("grep", pattern="TODO", path="/src", shows="/src/app.py:9:"), answer="2, both in /src/app.py."),
        run(step("grep", pattern="TODO|FIXME", path="/src"), answer="3"), 1)
    add("ch-vpn", "I'm new here. Following /docs/onboarding.md, ask the right person for VPN access, by message.",
        ("chain",), tools_of("files", "messages", "contacts"), (Sent("@omar", any=("vpn",)), SentCount(1)),
        run(step("cat", path="/docs/onboarding.md", shows="Omar (@omar) for VPN"),
            step("send_message", to="@omar", text="Hi Omar, could I get VPN access please?"), answer="Asked Omar."),
        run(step("send_message", to="@ana", text="Hi Ana, could I get VPN access please?"), answer="Asked Ana."), 2)
    add("ch-revenue-usd",
        "What was the north region's Q1 revenue in /data/sales-q1.csv (units times unit price, summed over the "
        "three months), in EUR, and how much is that in US dollars?", ("chain",), tools_of("files", "calc", "misc"),
        (Number(9360), Number(10108.8, tol=0.01)),
        run(step("cat", path="/data/sales-q1.csv"),
            step("calculate", expression="120*25 + 140*25 + 110*26", shows="9360"),
            step("convert_currency", amount=9360, from_currency="EUR", to_currency="USD", shows="10108.80"),
            answer="9,360 EUR, which is 10,108.80 USD."),
        run(step("cat", path="/data/sales-q1.csv"), answer="9,250 EUR, about 9,990 USD."), 3)
    add("ch-team-omar", "Which team is Omar in?", ("chain",), tools_of("contacts", "messages"),
        (Answer(all=("security",)),),
        run(step("lookup_contact", name="Omar", shows="team security"), answer="Security."),
        run(step("lookup_contact", name="Omar"), answer="Infra."), 1)
    add("ch-marathon", "Convert 42.195 km to miles, rounded to one decimal.", ("chain",), tools_of("misc", "calc"),
        (Number(26.2, tol=0.02),),
        run(step("convert_units", value=42.195, from_unit="km", to_unit="mi", shows="26.2188"), answer="26.2 miles"),
        run(answer="26.5 miles"), 1)
    add("ch-omar-label", "Do what Omar asks in his message.", ("chain",), tools_of("messages", "issues", "contacts"),
        (Issue(5, label="security"), IssueCount(8)),
        run(step("list_messages", shows="m2"), step("read_message", message_id="m2", shows="labelled security"),
            step("list_issues", shows="#5"), step("update_issue", issue_id=5, add_labels=["security"]),
            answer="Issue #5 (TLS certificate) is now labelled security."),
        run(step("read_message", message_id="m2"),
            step("create_issue", title="Renew the TLS certificate", labels=["security"]), answer="Opened an issue."), 2)
    add("ch-total-q1", "How many units were sold in Q1 across all regions, according to /data/sales-q1.csv?",
        ("chain",), tools_of("files", "shell", "calc"), (Number(875),),
        run(step("cat", path="/data/sales-q1.csv"),
            step("calculate", expression="120+95+60+140+80+75+110+105+90", shows="875"), answer="875 units."),
        run(step("cat", path="/data/sales-q1.csv"), answer="870 units."), 2)

    # --- recovery: a call the prompt leads to fails ----------------------------------------------------
    add("rc-todo-path", "Show me my todo list. I think it is /notes/todos.txt.", ("recovery",), _FILES,
        (Answer(all=("renew tls certificate", "water the plants")),),
        run(step("cat", path="/notes/todos.txt", fails=True), step("ls", path="/notes", shows="todo.txt"),
            step("cat", path="/notes/todo.txt"),
            answer="It is /notes/todo.txt: renew TLS certificate (due 2025-03-14), review Ana's pull request #42, "
                   "book a room for the retro, send the Q1 sales summary to Maria, water the plants."),
        run(step("cat", path="/notes/todos.txt", fails=True), answer="That file does not exist."), 2)
    add("rc-config-workers", "How many workers are configured? The config file is /config/config.yaml.", ("recovery",),
        _FILES, (Number(4),),
        run(step("cat", path="/config/config.yaml", fails=True),
            step("find", name="config.yaml", shows="/src/config.yaml"),
            step("cat", path="/src/config.yaml", shows="workers: 4"), answer="4 workers (in /src/config.yaml)."),
        run(step("cat", path="/config/config.yaml", fails=True), answer="8 workers, the default."), 2)
    add("rc-lee-infra", "Send Lee from the infra team this message: 'The staging deploy is done.'", ("recovery",),
        tools_of("contacts", "messages"), (Sent("@lee.park", all=("the staging deploy is done",)), NotSent("@lchen")),
        run(step("send_message", to="Lee", text="The staging deploy is done.", fails=True),
            step("send_message", to="@lee.park", text="The staging deploy is done."), answer="Sent to Lee Park."),
        run(step("send_message", to="@lchen", text="The staging deploy is done."), answer="Sent to Lee."), 2)
    add("rc-lisboa", "What's the weather in Lisboa right now?", ("recovery",), tools_of("misc"),
        (Number(19), Answer(any=("sunny",))),
        run(step("get_weather", city="Lisboa", fails=True), step("get_weather", city="Lisbon", shows="19 °C, sunny"),
            answer="19 °C and sunny in Lisbon."),
        run(step("get_weather", city="Lisboa", fails=True), answer="I could not find the weather for Lisboa."), 2)
    add("rc-issue-12", "Close issue #12, the one about slow order search.", ("recovery",), tools_of("issues"),
        (Issue(4, status="closed"), Closed((2, 4, 7)), IssueCount(8)),
        run(step("update_issue", issue_id=12, status="closed", fails=True),
            step("list_issues", shows="#4 [open] Slow order search"), step("update_issue", issue_id=4, status="closed"),
            answer="There is no #12; the slow order search issue is #4, now closed."),
        run(step("update_issue", issue_id=12, status="closed", fails=True),
            step("update_issue", issue_id=8, status="closed"), answer="Closed #8."), 3)
    add("rc-dentist-date", "Add 'Dentist' to my calendar on 14/03/2025 at 08:00 for 45 minutes.", ("recovery",),
        tools_of("calendar"), (Event("2025-03-14", "08:00", ("dentist",), 45), EventCount(7)),
        run(step("create_event", title="Dentist", date="14/03/2025", start="08:00", duration_minutes=45, fails=True),
            step("create_event", title="Dentist", date="2025-03-14", start="08:00", duration_minutes=45),
            answer="Dentist added on 2025-03-14 at 08:00 for 45 minutes."),
        run(step("create_event", title="Dentist", date="2025-03-14", start="08:00"), answer="Added."), 2)
    add("rc-percent", "Use the calculator to work out 15% of 2,340.", ("recovery",), tools_of("calc"), (Number(351),),
        run(step("calculate", expression="15% of 2,340", fails=True),
            step("calculate", expression="0.15 * 2340", shows="351"), answer="351"),
        run(step("calculate", expression="15% of 2,340", fails=True), answer="35.1"), 2)
    add("rc-archive-shopping", "Archive my shopping list: move /notes/shopping-list.txt to /archive/shopping.txt.",
        ("recovery",), tools_of("files", "write"),
        (File("/archive/shopping.txt", all=("coffee beans",)), NoFile("/notes/shopping.txt")),
        run(step("move_file", source="/notes/shopping-list.txt", destination="/archive/shopping.txt", fails=True),
            step("ls", path="/notes", shows="shopping.txt"),
            step("move_file", source="/notes/shopping.txt", destination="/archive/shopping.txt"),
            answer="Moved /notes/shopping.txt to /archive/shopping.txt."),
        run(step("cat", path="/notes/shopping.txt"),
            step("write_file", path="/archive/shopping.txt", content=world.SHOPPING), answer="Archived."), 2)
    add("rc-utils-lines", "How many lines does the utility module /src/utils.py have?", ("recovery",), _FILES,
        (Number(12),),
        run(step("wc", path="/src/utils.py", fails=True), step("ls", path="/src", shows="util.py"),
            step("wc", path="/src/util.py", shows="12 lines"), answer="It is /src/util.py: 12 lines."),
        run(step("wc", path="/src/utils.py", fails=True), answer="It has 11 lines."), 2)
    add("rc-release-event", "Cancel my 'Release planning' event; its id is ev-9.", ("recovery",), tools_of("calendar"),
        (NoEvent(("release planning",)), EventCount(5)),
        run(step("delete_event", event_id="ev-9", fails=True), step("list_events", shows="ev-5"),
            step("delete_event", event_id="ev-5"), answer="Deleted Release planning (it was ev-5)."),
        run(step("delete_event", event_id="ev-9", fails=True), step("delete_event", event_id="ev-4"),
            answer="Deleted."), 2)
    add("rc-pounds", "How much are 50 pounds sterling in euros?", ("recovery",), tools_of("misc"),
        (Number(59.52, tol=0.01),),
        run(step("convert_currency", amount=50, from_currency="pounds", to_currency="EUR", fails=True),
            step("convert_currency", amount=50, from_currency="GBP", to_currency="EUR", shows="59.52"),
            answer="59.52 EUR"),
        run(step("convert_currency", amount=50, from_currency="EUR", to_currency="GBP"), answer="42.00 EUR"), 2)
    add("rc-shell-save", "With the shell tool, list the files in /src and save that list into /notes/src-files.txt.",
        ("recovery",), tools_of("shell", "files", "write"),
        (File("/notes/src-files.txt", all=("app.py", "util.py", "config.yaml")),),
        run(step("shell", command="ls /src > /notes/src-files.txt", fails=True),
            step("shell", command="ls /src", shows="config.yaml"),
            step("write_file", path="/notes/src-files.txt", content="app.py\nconfig.yaml\nutil.py\n"),
            answer="Saved the list (app.py, config.yaml, util.py) to /notes/src-files.txt."),
        run(step("write_file", path="/notes/src-files.txt", content="app.py\nutil.py\n"), answer="Saved."), 3)
    add("rc-priya-email", "Message Priya at priya@falcon.example: 'I will be 10 minutes late.'", ("recovery",),
        tools_of("contacts", "messages"), (Sent("@priya", all=("10 minutes late",)), SentCount(1)),
        run(step("send_message", to="priya@falcon.example", text="I will be 10 minutes late.", fails=True),
            step("lookup_contact", name="Priya", shows="@priya"),
            step("send_message", to="@priya", text="I will be 10 minutes late."), answer="Sent to Priya (@priya)."),
        run(step("send_message", to="priya@falcon.example", text="I will be 10 minutes late.", fails=True),
            answer="Sent."), 2)
    add("rc-log-name", "How many ERROR lines are in /logs/application.log?", ("recovery", "long_context"),
        tools_of("files", "shell"), (Number(LOG["errors"]),),
        run(step("shell", command="grep -c ERROR /logs/application.log", fails=True),
            step("ls", path="/logs", shows="app.log"),
            step("shell", command="grep -c ERROR /logs/app.log", shows=str(LOG["errors"])),
            answer=f"The log is /logs/app.log: {LOG['errors']} ERROR lines."),
        run(step("ls", path="/logs"), answer=f"{LOG['errors'] - 1} ERROR lines."), 3)

    # --- every tool offered ------------------------------------------------------------------------------
    add("mt-tokyo", "What's the weather in Tokyo?", ("many_tools",), ALL, (Number(12), Answer(any=("clear",))),
        run(step("get_weather", city="Tokyo", shows="12 °C, clear"), answer="12 °C and clear."),
        run(answer="Sunny and 20 °C."), 1)
    add("mt-julia-email", "What is Julia's email address?", ("many_tools",), ALL,
        (Answer(all=("julia.novak@falcon.example",)),),
        run(step("lookup_contact", name="Julia", shows="julia.novak@falcon.example"),
            answer="julia.novak@falcon.example"),
        run(answer="julia@falcon.example"), 1)
    add("mt-budget-meeting", "Schedule 'Budget review' with Maria on Wednesday 2025-03-12 at 10:00 for one hour.",
        ("many_tools",), ALL, (Event("2025-03-12", "10:00", ("budget review",), 60, ("@maria",)), EventCount(7)),
        run(step("create_event", title="Budget review", date="2025-03-12", start="10:00", duration_minutes=60,
                 attendees=["@maria"]), answer="Scheduled."),
        run(step("create_event", title="Budget review", date="2025-03-12", start="11:00", attendees=["@maria"]),
            answer="Scheduled."), 2)
    add("mt-new-bug", "File a bug titled 'Search returns duplicates' with the label bug.", ("many_tools",), ALL,
        (Issue(title=("search returns duplicates",), label="bug", status="open"), IssueCount(9)),
        run(step("create_issue", title="Search returns duplicates", labels=["bug"]), answer="Filed #9."),
        run(step("create_issue", title="Search returns duplicates", labels=["feature"]), answer="Filed #9."), 1)
    add("mt-umbrella", "Check the weather in Berlin and message Tom (@tom) whether he needs an umbrella today.",
        ("many_tools", "chain"), ALL, (Sent("@tom", any=("rain", "raining", "rainy", "yes")), SentCount(1)),
        run(step("get_weather", city="Berlin", shows="rain"),
            step("send_message", to="@tom", text="Yes, take an umbrella: rain in Berlin today (9 °C)."),
            answer="Told Tom."),
        run(step("send_message", to="@tom", text="No need for an umbrella today."), answer="Told Tom."), 2)
    add("mt-kg-lb", "How many pounds is 70 kg? Round to one decimal.", ("many_tools",), ALL,
        (Number(154.3, tol=0.02),),
        run(step("convert_units", value=70, from_unit="kg", to_unit="lb", shows="154.32"), answer="154.3 lb"),
        run(answer="154.7 lb"), 1)
    add("mt-staging-host", "Find the document that mentions the staging server and tell me the server's hostname.",
        ("many_tools", "chain"), ALL, (Answer(all=("staging-3.falcon.internal",)),),
        run(step("grep", pattern="staging", shows="/docs/onboarding.md"), answer="staging-3.falcon.internal"),
        run(answer="staging.falcon.internal"), 2)
    add("mt-inbox-count", "How many messages are in my inbox?", ("many_tools",), ALL, (Number(5),),
        run(step("list_messages", shows="m5"), answer="5 messages."), run(answer="4 messages."), 1)
    add("mt-e4012-comment", "Add the comment 'Fixed in 2.4.2' to the issue about payment timeouts.",
        ("many_tools", "chain"), ALL, (Issue(8, comment=("fixed in 2.4.2",)), IssueCount(8)),
        run(step("list_issues", shows="#8 [open] Payment timeout errors"),
            step("comment_issue", issue_id=8, text="Fixed in 2.4.2"), answer="Commented on #8."),
        run(step("comment_issue", issue_id=4, text="Fixed in 2.4.2"), answer="Commented on #4."), 2)
    add("mt-oncall-e4012",
        "Tom is on call. Find the open issue about error code E4012, assign it to him, and tell him the issue number "
        "by message.", ("many_tools", "chain"), ALL,
        (Issue(8, assignee="@tom"), Sent("@tom", any=("#8", "issue 8", "issue number 8", "number 8")), SentCount(1),
         IssueCount(8)),
        run(step("list_issues", shows="E4012"), step("update_issue", issue_id=8, assignee="@tom"),
            step("send_message", to="@tom", text="You're on issue #8 (payment timeouts, E4012)."),
            answer="Assigned #8 to Tom and told him."),
        run(step("update_issue", issue_id=4, assignee="@tom"), step("send_message", to="@tom", text="Please take #4."),
            answer="Done."), 3)
    add("mt-inventory-total", "What is the total count of all items in /data/inventory.csv?", ("many_tools", "chain"),
        ALL, (Number(274),),
        run(step("cat", path="/data/inventory.csv"), step("calculate", expression="42+130+8+75+19", shows="274"),
            answer="274"),
        run(step("cat", path="/data/inventory.csv"), answer="264"), 2)

    # --- long context: a big file or a long conversation ---------------------------------------------------
    add("lc-log-errors", "How many ERROR lines are in /logs/app.log?", ("long_context",), tools_of("files", "shell"),
        (Number(LOG["errors"]),),
        run(step("shell", command="grep -c ERROR /logs/app.log", shows=str(LOG["errors"])),
            answer=f"{LOG['errors']} ERROR lines."),
        run(step("cat", path="/logs/app.log"), answer=f"{LOG['errors'] - 2} ERROR lines."), 2)
    add("lc-cert-expiry", "Somewhere in /logs/app.log the expiry date of a certificate is logged. When does it expire?",
        ("long_context",), _FILES, (Answer(any=dates(world.CERT_EXPIRY)),),
        run(step("cat", path="/logs/app.log", shows=f"expires on {world.CERT_EXPIRY}"),
            answer=f"On {world.CERT_EXPIRY} (the certificate for api.falcon.example)."),
        run(step("cat", path="/logs/app.log"), answer="On 2025-03-09."), 2)
    top, top_n = LOG["top_service"]
    add("lc-top-service", "Which service logged the most ERROR lines in /logs/app.log, and how many?",
        ("long_context", "chain"), tools_of("files", "shell"), (Answer(all=(top,)), Number(top_n)),
        run(step("grep", pattern="ERROR", path="/logs/app.log", shows=f"ERROR {top}:"),
            answer=f"{top}, with {top_n} ERROR lines."),
        run(step("grep", pattern="ERROR", path="/logs/app.log"), answer="inventory, with 5."), 3)
    add("lc-first-error", "What is the timestamp of the first ERROR line in /logs/app.log?", ("long_context",),
        tools_of("files", "shell"), (Answer(all=(LOG["first_error"].split()[1],)),),
        run(step("grep", pattern="ERROR", path="/logs/app.log", shows=LOG["first_error"]),
            answer=LOG["first_error"]),
        run(step("head", path="/logs/app.log"), answer="2025-03-09 00:00:00"), 2)
    add("lc-hotel-usd",
        "According to /docs/handbook.md, how much may a hotel cost per night? Give the amount in EUR and in USD.",
        ("long_context", "chain"), tools_of("files", "misc", "calc"),
        (Number(world.HOTEL_LIMIT_EUR), Number(round(world.HOTEL_LIMIT_EUR * world.RATES["USD"], 2), tol=0.01)),
        run(step("cat", path="/docs/handbook.md", shows=f"at most {world.HOTEL_LIMIT_EUR} EUR per night"),
            step("convert_currency", amount=world.HOTEL_LIMIT_EUR, from_currency="EUR", to_currency="USD",
                 shows="194.40"), answer="180 EUR per night, which is 194.40 USD."),
        run(step("cat", path="/docs/handbook.md"), answer="150 EUR (162 USD)."), 3)
    add("lc-first-class",
        "According to /docs/handbook.md, from how many hours of travel time may I take a first class train?",
        ("long_context",), _FILES, (Number(world.FIRST_CLASS_HOURS),),
        run(step("cat", path="/docs/handbook.md", shows="first class when the trip takes more than 4 hours"),
            answer="When the trip takes more than 4 hours."),
        run(step("cat", path="/docs/handbook.md"), answer="From 6 hours."), 2)
    add("lc-hist-booking", "Send Maria the venue booking reference I mentioned earlier in this conversation.",
        ("long_context",), tools_of("messages", "contacts"), (Sent("@maria", all=("qx-7731",)), SentCount(1)),
        run(step("send_message", to="@maria", text="The venue booking reference is QX-7731."), answer="Sent."),
        run(step("send_message", to="@maria", text="The venue booking reference is QX-7713."), answer="Sent."), 2,
        HISTORY)
    add("lc-hist-budget", "What budget cap did I mention earlier? Reply with the amount.",
        ("long_context", "no_tool"), tools_of("calc", "messages"), (Number(2400), Unchanged()),
        run(answer="2,400 EUR"), run(answer="2,500 EUR"), 1, HISTORY)
    add("lc-hist-quotes",
        "Add up the three quotes I gave you earlier in this conversation (catering, AV and venue) with the "
        "calculator, and tell me the total.", ("long_context", "chain"), tools_of("calc"), (Number(2550),),
        run(step("calculate", expression="1150 + 420 + 980", shows="2550"), answer="2,550 EUR"),
        run(step("calculate", expression="1150 + 420 + 880"), answer="2,450 EUR"), 3, HISTORY)
    add("lc-hist-event",
        "Put the offsite I mentioned earlier into my calendar, on the date and at the start time I said, for 3 hours.",
        ("long_context",), tools_of("calendar"), (Event("2025-03-21", "13:00", ("offsite",), 180), EventCount(7)),
        run(step("create_event", title="Team offsite", date="2025-03-21", start="13:00", duration_minutes=180),
            answer="Added the offsite on 2025-03-21, 13:00-16:00."),
        run(step("create_event", title="Team offsite", date="2025-03-21", start="14:00", duration_minutes=180),
            answer="Added."), 2, HISTORY)
    return t


TASKS: tuple[Task, ...] = tuple(_tasks())
BY_ID: dict[str, Task] = {t.id: t for t in TASKS}
assert len(BY_ID) == len(TASKS), "task ids must be unique"
# Two halves, for a route learned from runs: learned on "train", shown on "held-out" (every other
# task of the list, so each kind is split about evenly)
HALVES: dict[str, frozenset[str]] = {
    "train": frozenset(t.id for t in TASKS[0::2]),
    "held-out": frozenset(t.id for t in TASKS[1::2]),
}


def select(
    ids: list[str] | None = None, kinds: list[str] | None = None, limit: int | None = None, half: str | None = None
) -> list[Task]:
    """Tasks by id (in the order given) or all; of any of `kinds`; of one of HALVES; `limit` of them
    spread evenly over the list (TASKS is grouped by kind: the first few would all be no_tool tasks)."""
    chosen = [BY_ID[i] for i in ids] if ids else list(TASKS)
    if half:
        if half not in HALVES:
            raise ValueError(f"unknown half {half!r}; halves: {', '.join(HALVES)}")
        chosen = [t for t in chosen if t.id in HALVES[half]]
    if kinds:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown kind(s) {sorted(unknown)}; kinds: {', '.join(KINDS)}")
        chosen = [t for t in chosen if set(kinds) & set(t.kinds)]
    if limit and limit < len(chosen):
        chosen = [chosen[i * len(chosen) // limit] for i in range(limit)]
    return chosen
