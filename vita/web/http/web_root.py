"""Which folder serves the page and its static files: an operator's own (``--web_root``) over ours.

An operator migrating from VITA points ``--web_root`` at their page folder. Its page (``index.html``, else
``demo.html``, also under ``resources/`` as in VITA's ``vita_html/web``) is served at ``/``; ``/static/NAME``
looks in the operator's ``static/`` folder, then the folder itself, then ours, so a page that lacks the
socket.io client or VITA's ``audio-processor`` worklet gets them from us. Only files under those folders can
be reached: Flask's ``safe_join`` refuses ``..`` and absolute paths.
"""

from __future__ import annotations

from pathlib import Path

from werkzeug.security import safe_join

from vita.config_checks import PAGE_NAMES


class WebRoot:
    def __init__(self, ours: Path, theirs: Path | None = None):
        self.ours = ours
        self.theirs = theirs
        self.page = self._find_page()
        self.static_dirs = tuple(d for d in ((theirs / "static", theirs) if theirs else ()) if d.is_dir()) + (ours,)

    def _find_page(self) -> Path:
        if self.theirs is not None:
            for name in PAGE_NAMES:
                if (self.theirs / name).is_file():
                    return self.theirs / name
        return self.ours / "index.html"

    def static(self, name: str) -> Path | None:
        """The first existing file called ``name`` in the static folders, or None (also for unsafe names)."""
        for folder in self.static_dirs:
            joined = safe_join(str(folder), name)
            if joined is not None and Path(joined).is_file():
                return Path(joined)
        return None
