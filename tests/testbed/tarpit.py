"""A tarpit host: a TCP listener that accepts every connection and never writes a byte (no SSH banner)."""

from __future__ import annotations

import socket
import threading


class Tarpit:
    """Listens on `address` (loopback by default) on a free port; holds what it accepts until closed."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self._listener = socket.create_server((address, 0))
        self.address, self.port = self._listener.getsockname()[:2]
        self.accepted = threading.Event()  # set once a client has connected
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, name="tarpit", daemon=True)

    def __enter__(self) -> "Tarpit":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            self._held.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()
