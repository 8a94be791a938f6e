"""A static HTTP server on 127.0.0.1 (an ephemeral port) in a thread, for download tests."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's signature)
        self.server.requested.append(self.path)


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve ``folder`` (symbolic links followed); yields the base URL (``http://127.0.0.1:PORT/``) and the list of
    request paths the server answered, appended as they arrive."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requested = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", server.requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
