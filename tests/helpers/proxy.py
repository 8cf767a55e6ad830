"""A TCP proxy in front of a private MariaDB, for failures no server can be asked for: a cut, a cut mid-packet, a
frozen peer."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Proxy:
    """Forwards 127.0.0.1:<port> to the server; ``cut()``, ``cut_after(n)`` and ``freeze()`` simulate failures."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.frozen = False
        self.cut_after_bytes: int | None = None  # cut once this many more bytes went server → client
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self.connections += 1
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, downstream: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while self.frozen:
                    time.sleep(0.05)
                if downstream and self.cut_after_bytes is not None:
                    if len(data) >= self.cut_after_bytes:
                        sink.sendall(data[: self.cut_after_bytes])
                        self.cut_after_bytes = None
                        self.cut()
                        return
                    self.cut_after_bytes -= len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._stop = True
        self.frozen = False
        self.listener.close()
        self.cut()
