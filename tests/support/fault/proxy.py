"""A loopback TCP proxy the fault run puts between some workers and Redis, to cut them off.

``cut()`` turns the proxy into a black hole: connections stay open but no byte moves either
way, as in a network partition (clients see time-outs, not resets). ``restore()`` lets bytes
move again for connections opened since the cut, and closes every connection that lived
through it: their clients gave up on those sockets, and late replies on them would only
confuse a reader of the run.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

_POLL_S = 0.05
_CHUNK = 65536


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``cut()`` and ``restore()`` partition it."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(_POLL_S)
        self.port = int(self._listener.getsockname()[1])
        self._cut = threading.Event()
        self._stopped = threading.Event()
        self._epoch = 0
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        """The Redis URL that goes through this proxy."""
        return f"redis://127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut.is_set()

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def cut(self) -> None:
        """Stop moving bytes (existing and new connections hang)."""
        self._epoch += 1
        self._cut.set()

    def restore(self) -> None:
        """Move bytes again; connections that lived through the cut are closed."""
        self._cut.clear()

    def retarget(self, host: str, port: int) -> None:
        """Forward new connections to ``host:port``; connections to the old target are closed,
        as a client following a new primary drops its pooled connections."""
        self.target = (host, port)
        self._epoch += 1

    def stop(self) -> None:
        self._stopped.set()
        self._cut.clear()
        self._thread.join(timeout=2.0)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        epoch = self._epoch
        upstream: socket.socket | None = None
        try:
            while not self._stopped.is_set():
                if self._cut.is_set():
                    self._stopped.wait(_POLL_S)
                    continue
                if epoch != self._epoch:
                    return  # lived through a cut
                if upstream is None:
                    upstream = socket.create_connection(self.target, timeout=2.0)
                    upstream.settimeout(None)
                readable, _, _ = select.select([client, upstream], [], [], _POLL_S)
                for sock in readable:
                    # Checked again per chunk: a cut must stop bytes already in flight here.
                    if self._cut.is_set():
                        break
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    (upstream if sock is client else client).sendall(data)
        except OSError:
            return
        finally:
            for end in (client, upstream):
                if end is not None:
                    with contextlib.suppress(OSError):
                        end.close()
