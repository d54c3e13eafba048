"""The board's questions: a yes/no confirmation, a line of text, and a new task's goal and prompt.

Each is a modal screen that answers through ``dismiss`` (None: the person backed out with Esc). The
question's words may hold an agent's text (a ref, the commits a moved branch holds): they are shown
as Rich ``Text``, made safe first, never as markup.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from corral.domain.sanitize import display

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


class NewTask(ModalScreen[tuple[str, str] | None]):
    """A new task's goal (one line) and prompt (optional): Enter on the goal moves to the prompt, Enter
    there creates it; Esc gives None."""

    DEFAULT_CSS = _CSS.format(name="NewTask")
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "cancel", "back", show=False)
    ]

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("New task — its goal, then (optional) a prompt for the agent. Enter creates it; Esc backs out.")
            yield Input(placeholder="goal: what done looks like", id="goal")
            yield Input(placeholder="prompt (optional)", id="prompt")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        goal = self.query_one("#goal", Input).value
        if event.input.id == "goal" and goal.strip():
            self.query_one("#prompt", Input).focus()
            return
        if not goal.strip():
            self.query_one("#goal", Input).focus()
            return
        self.dismiss((goal, self.query_one("#prompt", Input).value))

    def action_cancel(self) -> None:
        self.dismiss(None)
