"""The board's questions: a yes/no confirmation, a line of text, and a new task's form.

Each is a modal screen that answers through ``dismiss`` (None: the person backed out with Esc). The
question's words may hold an agent's text (a ref, the commits a moved branch holds): they are shown
as Rich ``Text``, made safe first, never as markup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, TextArea

from corral.adapters.harness import NAMES as HARNESSES
from corral.cli.board_actions import NewTaskForm, globs, said
from corral.domain.sanitize import display
from corral.errors import CorralError

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 80%; max-width: 100; height: auto; border: round $accent; padding: 0 1;
                     background: $surface; }}
{name} Label {{ width: 100%; }}
{name} Input {{ margin: 0 0 1 0; }}
"""


def _text(words: str) -> Text:
    return Text(display(words))


class Confirm(ModalScreen[bool]):
    """``question [y/N]``: ``y`` answers True; any other key, False."""

    DEFAULT_CSS = _CSS.format(name="Confirm")

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(_text(f"{self.question} [y/N]"), id="question")

    def on_key(self, event: Any) -> None:
        event.stop()
        self.dismiss(event.key in ("y", "Y"))


class Ask(ModalScreen[str | None]):
    """One line of text: Enter gives it, Esc gives None."""

    DEFAULT_CSS = _CSS.format(name="Ask")
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "cancel", "back", show=False)
    ]

    def __init__(self, question: str, placeholder: str = "") -> None:
        super().__init__()
        self.question = question
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(_text(self.question))
            yield Input(placeholder=self.placeholder, id="answer")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class NewTask(ModalScreen[str | None]):
    """A new task: what ``corral create`` (and the dashboard's form) take — its goal, a prompt, the harness
    (the project's default, or one corral knows), the target branch, a ref and protected paths.

    Enter on the goal moves to the prompt; Enter on any other line, Ctrl+S anywhere or the button creates
    it through ``create`` (run on a thread: the engine's own operation, opened afresh). The dialog answers
    with what ``create`` said (the board shows it); a refusal is shown here, message and hint, and what was
    typed stays, to be put right. Esc gives None."""

    DEFAULT_CSS = (
        _CSS.format(name="NewTask")
        + """
NewTask Horizontal { height: auto; }
NewTask .field { width: 10; }
NewTask Input, NewTask Select { width: 1fr; margin: 0 0 0 0; }
NewTask TextArea { width: 1fr; height: 3; }
NewTask #said { color: $error; height: auto; }
NewTask Button { margin: 1 0 0 0; }
"""
    )
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "cancel", "back", show=False),
        Binding("ctrl+s", "create", "create", show=False, priority=True),
    ]

    def __init__(self, create: Callable[[NewTaskForm], str]) -> None:
        super().__init__()
        self.create = create
        self.creating = False  # a create runs on its thread: Enter again waits for its answer

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(
                "New task. Tab moves between fields; Enter creates it (on the goal: on to the prompt), "
                "as Ctrl+S does anywhere; Esc backs out."
            )
            yield from _row("Goal", Input(placeholder="one line: what done looks like", id="goal", compact=True))
            yield from _row(
                "Prompt", Input(placeholder="what the agent should know (optional)", id="prompt", compact=True)
            )
            harnesses = Select(
                [(name, name) for name in HARNESSES], prompt="the project's default", id="harness", compact=True
            )
            yield from _row("Harness", harnesses)
            yield from _row("Target", Input(placeholder="the branch checked out now", id="target", compact=True))
            yield from _row("Ref", Input(placeholder="made from the goal", id="ref", compact=True))
            protect = TextArea(id="protect", compact=True, placeholder="one glob a line, or a, b (e.g. migrations/*)")
            yield from _row("Protected", protect)
            yield Label("", id="said")
            yield Button("Create", id="create", compact=True)

    def form(self) -> NewTaskForm:
        def line(name: str) -> str:
            return self.query_one(f"#{name}", Input).value.strip()

        harness = self.query_one("#harness", Select).value
        return NewTaskForm(
            goal=line("goal"),
            prompt=line("prompt"),
            harness=harness if isinstance(harness, str) else None,
            target=line("target") or None,
            ref=line("ref") or None,
            protect=globs(self.query_one("#protect", TextArea).text),
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "goal" and self.form().goal:
            self.query_one("#prompt", Input).focus()
            return
        self.action_create()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_create()

    def action_create(self) -> None:
        form = self.form()
        if not form.goal:
            self.tell("A task needs a goal: write it first.")
            self.query_one("#goal", Input).focus()
            return
        if self.creating:
            return
        self.creating = True
        self.tell("Creating…")

        def work() -> None:
            try:
                words = self.create(form)
            except CorralError as exc:
                self.app.call_from_thread(self.answered, None, said(exc))
            except Exception as exc:  # said in the dialog, never a traceback over the board
                self.app.call_from_thread(self.answered, None, f"create failed: {type(exc).__name__}: {exc}")
            else:
                self.app.call_from_thread(self.answered, words, "")

        self.run_worker(work, thread=True, exit_on_error=False)

    def answered(self, words: str | None, refusal: str) -> None:
        self.creating = False
        if words is not None:
            self.dismiss(words)
            return
        self.tell(refusal)

    def tell(self, words: str) -> None:
        self.query_one("#said", Label).update(_text(words))

    def action_cancel(self) -> None:
        self.dismiss(None)


def _row(name: str, field: Widget) -> Iterator[Widget]:
    """One field of a form: its name, then the field."""
    yield Horizontal(Label(name, classes="field"), field)
