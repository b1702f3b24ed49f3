"""A Hugging Face Hub and a download server on 127.0.0.1, for tests that must never reach the
internet: `resolve` URLs of fixture repositories with the headers `huggingface_hub` reads
(`X-Repo-Commit`, `ETag` / `X-Linked-Etag`, `X-Error-Code`), and plain files under `/files/`.
Faults are switched on per test: a corrupt body, a short body, a server that is gone."""

import dataclasses
import hashlib
import http.server
import threading
from collections import Counter
from pathlib import Path


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@dataclasses.dataclass
class Repository:
    """Files per commit; `refs` names commits (`main` -> the newest)."""

    commits: dict[str, dict[str, bytes]]
    refs: dict[str, str]

    def files_at(self, revision: str) -> tuple[str, dict[str, bytes]] | None:
        commit = self.refs.get(revision, revision)
        return (commit, self.commits[commit]) if commit in self.commits else None


@dataclasses.dataclass
class Faults:
    corrupt: set[str] = dataclasses.field(default_factory=set)  # file names served altered
    short: set[str] = dataclasses.field(default_factory=set)  # served with the last bytes cut


class LocalHub:
    def __init__(self):
        self.repositories: dict[str, Repository] = {}
        self.files: dict[str, bytes] = {}  # /files/<name>
        self.faults = Faults()
        self.downloads: Counter[str] = Counter()  # GETs per path
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stops serving (a network that is gone); safe to call twice."""
        if self._server.socket.fileno() != -1:
            self._server.shutdown()
            self._server.server_close()

    def add_repository(self, repo: str, folder: Path, names=("config.json", "model.safetensors")):
        files = {name: (folder / name).read_bytes() for name in names}
        commit = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
        if repo in self.repositories:
            self.repositories[repo].commits[commit] = files
            self.repositories[repo].refs["main"] = commit
        else:
            self.repositories[repo] = Repository({commit: files}, {"main": commit})
        return commit

    def _answer(self, handler, body: bool) -> None:
        path = handler.path.split("?")[0]
        if path.startswith("/files/"):
            name = path.removeprefix("/files/")
            return self._send(handler, self.files.get(name), name, {}, body, cut_connection=True)
        parts = path.strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self._error(handler, 404, "RepoNotFound")
        repo, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        if repo not in self.repositories:
            return self._error(handler, 401, "RepoNotFound")
        found = self.repositories[repo].files_at(revision)
        if found is None:
            return self._error(handler, 404, "RevisionNotFound")
        commit, files = found
        if name not in files:
            return self._error(handler, 404, "EntryNotFound", {"X-Repo-Commit": commit})
        data = files[name]
        lfs = name.endswith(".safetensors")
        etag = hashlib.sha256(data).hexdigest() if lfs else git_blob_id(data)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"'}
        if lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(len(data))
        self._send(handler, data, name, headers, body)

    def _send(self, handler, data, name, headers, body: bool, cut_connection=False) -> None:
        """A short body is sent with the whole length announced and the connection closed
        (`cut_connection`, as a dropped download), or with its own length (the Hub's client then
        compares it with the size the HEAD request announced)."""
        if data is None:
            return self._error(handler, 404, "EntryNotFound")
        length = len(data)
        if body:
            self.downloads[handler.path.split("?")[0]] += 1
            if name in self.faults.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            if name in self.faults.short:
                data = data[: len(data) // 2]
                length = length if cut_connection else len(data)
                handler.close_connection = True
        handler.send_response(200)
        for key, value in {**headers, "Content-Length": str(length)}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def _error(self, handler, status: int, code: str, headers=None) -> None:
        handler.send_response(status)
        for key, value in {"X-Error-Code": code, **(headers or {})}.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
