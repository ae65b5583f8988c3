"""What a measured lowering shows as it goes (lower(..., measure=True, progress=...)): a tqdm bar
when tqdm is installed (Debian: python3-tqdm) and stderr is a terminal, else a plain line on stderr; either only once the
lowering has taken a second, so that a quick one prints nothing. progress=False is silent; a
callable gets each torch_delegate.ProgressUpdate instead."""
from __future__ import annotations

import sys
from typing import Any, Optional

from . import _C

#: seconds before anything is shown
DELAY_S = 1.0


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # not a file, or closed
        return False


class ProgressPrinter:
    """The default progress: call it with each _C.ProgressUpdate. A tqdm bar over the lowerings
    (choose_order makes several), its text what is being timed; without tqdm, a line on stderr
    each time the stage or the lowering changes (at most one a second otherwise)."""

    def __init__(self, who: str = "torch_delegate.lower", stream: Any = None, use_tqdm: Optional[bool] = None):
        self.who = who
        self.stream = stream if stream is not None else sys.stderr
        self.bar = None
        self.tqdm = None
        # A bar redraws in place: on a terminal. Into a log (CI, a redirected stderr) every redraw
        # would be kept, so there plain lines, at most one a second.
        if use_tqdm or (use_tqdm is None and _is_terminal(self.stream)):
            try:
                from tqdm import tqdm  # noqa: F401 (optional)
                self.tqdm = tqdm
            except ImportError:
                if use_tqdm:
                    raise
        self.last_line_s = -1.0
        self.last_key = None

    def __call__(self, update: "_C.ProgressUpdate") -> None:
        if update.elapsed_s < DELAY_S and update.stage != "done":
            return
        if self.tqdm is not None:
            self._bar(update)
        else:
            self._line(update)

    def _bar(self, update) -> None:
        if self.bar is None:
            if update.stage == "done" and update.elapsed_s < DELAY_S:
                return
            self.bar = self.tqdm(total=update.steps, desc=f"{self.who}: measuring", unit="lowering", file=self.stream,
                                 leave=True, dynamic_ncols=True)
        if self.bar.total != update.steps:
            self.bar.total = update.steps
        self.bar.n = update.step
        self.bar.set_postfix_str(f"{update.stage}: {update.detail}" if update.detail else update.stage, refresh=False)
        self.bar.refresh()
        if update.stage == "done":
            self.bar.close()
            self.bar = None

    def _line(self, update) -> None:
        if update.stage == "done" and self.last_line_s < 0:
            return  # quick: nothing was shown, nothing to close
        key = (update.stage, update.step)
        if key == self.last_key and update.elapsed_s - self.last_line_s < 1.0 and update.stage != "done":
            return
        self.last_key, self.last_line_s = key, update.elapsed_s
        where = f" [{update.step}/{update.steps}]" if update.steps > 1 else ""
        text = f"{update.stage}: {update.detail}" if update.detail else update.stage
        print(f"{self.who}: measuring{where} {update.elapsed_s:.1f} s, {text}", file=self.stream, flush=True)
