"""The request handler of :mod:`tests.cluster.fakeapi`: routes, the API server's answers, watch and
log streams (chunked), fault injection. Split from the server's state for size only."""

from __future__ import annotations

import copy
import json
import re
import socket
import struct
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.cluster.fakeapi import (
    FakeApiServer,
    Fault,
    Res,
    _Reset,
    now_iso,
    status_obj,
    unknown_fields,
)


def make_handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except _Reset:
                self._rst()
            except (ConnectionError, BrokenPipeError, ValueError, OSError):
                self.close_connection = True

        def _rst(self) -> None:
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            except OSError:
                pass

        # -- plumbing ------------------------------------------------------------------------
        def _send_json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _fail(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                  headers: dict[str, str] | None = None) -> None:
            self._send_json(code, status_obj(code, reason, message, details), headers)

        def _read_body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _dispatch(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
            server.requests.append({"method": method, "path": parts.path, "query": query,
                                    "body": body.decode("utf-8", "replace")})
            fault = server.take_fault(method, parts.path)
            if fault and fault.action == "reset_before":
                raise _Reset()
            if fault and fault.action == "status":
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else None
                reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                          504: "Timeout"}.get(fault.status, "InternalError")
                self._fail(fault.status, reason, f"injected {fault.status}", headers=headers)
                return
            if self.headers.get("Authorization") != f"Bearer {server.token}":
                self._fail(401, "Unauthorized", "Unauthorized")
                return
            route(self, method, parts.path, query, body, fault)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

    def forbidden(h: BaseHTTPRequestHandler, verb: str, resource: str, group: str, ns: str, name: str) -> bool:
        if (verb, resource, ns) not in server.forbidden:
            return False
        full = f"{resource}.{group}" if group else resource
        target = f'{full} "{name}"' if name else full
        api_group = f'in API group "{group}"'
        msg = (f'{target} is forbidden: User "fake-user" cannot {verb} resource "{resource}" '
               f'{api_group} in the namespace "{ns}"')
        h._fail(403, "Forbidden", msg, {"name": name, "group": group, "kind": resource} if name
                else {"group": group, "kind": resource})
        return True

    def route(h: Any, method: str, path: str, query: dict[str, str], body: bytes, fault: Fault | None) -> None:
        if path == "/api":
            h._send_json(200, {"kind": "APIVersions", "versions": ["v1"]})
            return
        if path == "/apis":
            gvs = sorted({(r.group, r.version) for r in server.resources if server.served(r)})
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                       "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in gvs]
            h._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return
        for res in server.resources:
            if path == f"/apis/{res.group}/{res.version}":
                if not server.served(res):
                    h._fail(404, "NotFound", "the server could not find the requested resource")
                    return
                listed = [r for r in server.resources if (r.group, r.version) == (res.group, res.version)]
                h._send_json(200, {
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{res.group}/{res.version}",
                    "resources": [
                        entry for r in listed for entry in (
                            {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
                             "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]},
                            {"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                             "verbs": ["get", "patch", "update"]})
                    ]})
                return
            scope = "namespaces/([^/]+)/" if res.namespaced else "()"
            m = re.fullmatch(rf"/apis/{res.group}/{res.version}/{scope}{res.plural}(?:/([^/]+))?", path)
            if m:
                if not server.served(res):
                    h._fail(404, "NotFound", "the server could not find the requested resource")
                    return
                jobs_route(h, res, method, m.group(1), m.group(2) or "", query, body, fault)
                return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps/([^/]+)", path)
        if m and method == "GET":
            ns, name = m.groups()
            if forbidden(h, "get", "configmaps", "", ns, name):
                return
            with server._lock:
                cm = server._configmaps.get((ns, name))
            if cm is None:
                h._fail(404, "NotFound", f'configmaps "{name}" not found', {"name": name, "kind": "configmaps"})
            else:
                h._send_json(200, cm)
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path)
        if m and method == "GET":
            ns = m.group(1)
            if forbidden(h, "list", "pods", "", ns, ""):
                return
            sel = _parse_selector(query.get("labelSelector", ""))
            with server._lock:
                items = [copy.deepcopy(p) for (pns, _), p in sorted(server._pods.items())
                         if pns == ns and _matches(p["metadata"].get("labels", {}), sel)]
            h._send_json(200, {"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": str(server._rv)}, "items": items})
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path)
        if m and method == "POST":
            ns = m.group(1)
            obj = json.loads(body or b"{}")
            name = obj.get("metadata", {}).get("name", "")
            if forbidden(h, "create", "pods", "", ns, name):
                return
            server.add_pod(ns, name, obj.get("metadata", {}).get("labels") or {}, phase="Pending",
                           containers=tuple(c["name"] for c in obj["spec"]["containers"]), done=False)
            with server._lock:
                server._pods[(ns, name)]["spec"] = copy.deepcopy(obj["spec"])
                stored = copy.deepcopy(server._pods[(ns, name)])
            if server.on_pod_created is not None:
                server.on_pod_created(ns, name, obj)
            h._send_json(201, stored)
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", path)
        if m and method in ("GET", "DELETE"):
            ns, name = m.groups()
            if forbidden(h, "get" if method == "GET" else "delete", "pods", "", ns, name):
                return
            with server._lock:
                pod = server._pods.get((ns, name))
                if pod is not None and method == "DELETE":
                    del server._pods[(ns, name)]
                    server.deleted_pods.append(name)
            if pod is None:
                h._fail(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            else:
                h._send_json(200, copy.deepcopy(pod))
            return
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path)
        if m and method == "GET":
            logs_route(h, m.group(1), m.group(2), query)
            return
        h._fail(404, "NotFound", "the server could not find the requested resource")

    def jobs_route(h: Any, res: Res, method: str, ns: str, name: str, query: dict[str, str], body: bytes,
                   fault: Fault | None) -> None:
        watch = query.get("watch") in ("true", "1")
        verb = {"POST": "create", "DELETE": "delete", "PUT": "update"}.get(method) or ("get" if name else ("watch" if watch else "list"))
        if forbidden(h, verb, res.plural, res.group, ns, name):
            return
        if method == "POST" and not name:
            create(h, res, ns, query, body, fault)
        elif method == "GET" and name:
            with server._lock:
                obj = res.store.get((ns, name))
            if obj is None:
                h._fail(404, "NotFound", f'{res.plural}.{res.group} "{name}" not found',
                        {"name": name, "group": res.group, "kind": res.plural})
            else:
                h._send_json(200, copy.deepcopy(obj))
        elif method == "PUT" and name:
            replace(h, res, ns, name, body)
        elif method == "GET" and watch:
            watch_jobs(h, res, ns, query)
        elif method == "GET":
            with server._lock:
                items = [copy.deepcopy(o) for o in _select_jobs(res, ns, query)]
                rv = server._rv
            h._send_json(200, {"apiVersion": f"{res.group}/{res.version}", "kind": f"{res.kind}List",
                               "metadata": {"resourceVersion": str(rv)}, "items": items})
        elif method == "DELETE" and name:
            delete(h, res, ns, name, query)
        else:
            h._fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _select_jobs(res: Res, ns: str, query: dict[str, str]) -> list[dict[str, Any]]:
        fsel = query.get("fieldSelector", "")
        want_name = fsel.split("=", 1)[1] if fsel.startswith("metadata.name=") else None
        sel = _parse_selector(query.get("labelSelector", ""))
        return [o for (jns, jname), o in sorted(res.store.items())
                if jns == ns and want_name in (None, jname) and _matches(o["metadata"].get("labels", {}), sel)]

    def create(h: Any, res: Res, ns: str, query: dict[str, str], body: bytes, fault: Fault | None) -> None:
        dry = query.get("dryRun")
        if dry is not None and dry != "All":
            h._fail(400, "BadRequest", f'Invalid dry run value: "{dry}"')
            return
        try:
            obj = json.loads(body)
        except ValueError as exc:
            h._fail(400, "BadRequest", f"the body of the request was in an unknown format: {exc}")
            return
        if not isinstance(obj, dict):
            h._fail(400, "BadRequest", "the body of the request must be an object")
            return
        kind = obj.get("kind", "")
        if obj.get("apiVersion") != f"{res.group}/{res.version}" or kind != res.kind:
            h._fail(400, "BadRequest", f'the API version in the data ({obj.get("apiVersion")}) does not match '
                    f"the expected API version ({res.group}/{res.version})")
            return
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace") and meta["namespace"] != ns:
            h._fail(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
            return
        meta["namespace"] = ns
        if query.get("fieldValidation") == "Strict":
            schema = server.schema() if res.plural == "pytorchjobs" else None
            if schema is not None:
                unknown = unknown_fields(obj, schema)
                if unknown:
                    msg = ", ".join(f'unknown field "{u}"' for u in unknown)
                    h._fail(400, "BadRequest", f'{res.kind} in version "{res.version}" cannot be handled as a '
                            f"{res.kind}: strict decoding error: {msg}")
                    return
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                h._fail(422, "Invalid", f'{res.kind}.{res.group} "" is invalid: metadata.name: Required value: '
                        "name or generateName is required",
                        {"group": res.group, "kind": res.kind, "causes": [
                            {"reason": "FieldValueRequired", "message": "Required value: name or generateName is required",
                             "field": "metadata.name"}]})
                return
        name = meta["name"]
        with server._lock:
            exists = (ns, name) in res.store
        if exists:
            h._fail(409, "AlreadyExists", f'{res.plural}.{res.group} "{name}" already exists',
                    {"name": name, "group": res.group, "kind": res.plural})
            return
        if server.admission is not None:
            causes = server.admission(obj)
            if causes:
                text = ", ".join(f"{f}: {m}" for f, m in causes)
                h._fail(422, "Invalid", f'{res.kind}.{res.group} "{name}" is invalid: {text}',
                        {"name": name, "group": res.group, "kind": res.kind,
                         "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]})
                return
        if server.defaulting is not None:
            server.defaulting(obj)
        if dry == "All":
            out = copy.deepcopy(obj)
            out.pop("status", None)
            out["metadata"].update({"uid": str(uuid.uuid4()), "creationTimestamp": now_iso(), "generation": 1})
            h._send_json(201, out)
            return
        with server._lock:
            if (ns, name) in res.store:  # lost a race with another request
                h._fail(409, "AlreadyExists", f'{res.plural}.{res.group} "{name}" already exists',
                        {"name": name, "group": res.group, "kind": res.plural})
                return
            stored = server._store_new(obj, res)
        if fault and fault.action == "reset_after":
            raise _Reset()
        if fault and fault.action == "status_after":
            h._fail(fault.status, "Timeout", "the server was unable to return a response in the time allotted")
            return
        h._send_json(201, stored)

    def replace(h: Any, res: Res, ns: str, name: str, body: bytes) -> None:
        obj = json.loads(body or b"{}")  # PUT: optimistic concurrency on resourceVersion (stale: 409 Conflict)
        with server._lock:
            old = res.store.get((ns, name))
            if old is None:
                h._fail(404, "NotFound", f'{res.plural}.{res.group} "{name}" not found', {"name": name, "group": res.group, "kind": res.plural})
                return
            if obj.get("metadata", {}).get("resourceVersion") != old["metadata"]["resourceVersion"]:
                h._fail(409, "Conflict", f'Operation cannot be fulfilled on {res.plural}.{res.group} "{name}": the object has been modified')
                return
            new = copy.deepcopy(obj)
            if server.defaulting is not None:
                server.defaulting(new)
            new["metadata"] = {**old["metadata"], **{k: v for k, v in obj["metadata"].items() if k in ("labels", "annotations")}}
            new.pop("status", None)
            new.update({"status": old["status"]} if old.get("status") else {})
            if "dryRun" not in h.path:
                new["metadata"]["resourceVersion"] = str(server._next_rv())
                new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
                res.store[(ns, name)] = new
                server._emit("MODIFIED", new)
        h._send_json(200, copy.deepcopy(new))

    def delete(h: Any, res: Res, ns: str, name: str, query: dict[str, str]) -> None:
        with server._lock:
            obj = res.store.get((ns, name))
            if obj is None:
                h._fail(404, "NotFound", f'{res.plural}.{res.group} "{name}" not found',
                        {"name": name, "group": res.group, "kind": res.plural})
                return
            if server.delete_delay > 0:
                if not obj["metadata"].get("deletionTimestamp"):
                    obj["metadata"]["deletionTimestamp"] = now_iso()
                    if query.get("propagationPolicy") == "Foreground":
                        obj["metadata"]["finalizers"] = ["foregroundDeletion"]
                    obj["metadata"]["resourceVersion"] = str(server._next_rv())
                    server._emit("MODIFIED", obj)
                    timer = threading.Timer(server.delete_delay, _finish_delete, args=(res, ns, name))
                    timer.daemon = True
                    timer.start()
                out = copy.deepcopy(obj)
            else:
                out = _remove(res, ns, name)
        h._send_json(200, out)

    def _remove(res: Res, ns: str, name: str) -> dict[str, Any]:
        obj = res.store.pop((ns, name))
        obj["metadata"]["resourceVersion"] = str(server._next_rv())
        server._emit("DELETED", obj)
        return copy.deepcopy(obj)

    def _finish_delete(res: Res, ns: str, name: str) -> None:
        with server._lock:
            if (ns, name) in res.store:
                _remove(res, ns, name)

    def watch_jobs(h: Any, res: Res, ns: str, query: dict[str, str]) -> None:
        rv_text = query.get("resourceVersion", "")
        timeout = min(float(query.get("timeoutSeconds") or server.watch_timeout_cap), server.watch_timeout_cap)
        deadline = time.monotonic() + timeout
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(obj: dict[str, Any]) -> None:
            data = (json.dumps(obj) + "\n").encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        fsel = query.get("fieldSelector", "")
        want = fsel.split("=", 1)[1] if fsel.startswith("metadata.name=") else None
        with server._lock:
            if rv_text in ("", "0"):
                pending = [("ADDED", copy.deepcopy(o)) for o in _select_jobs(res, ns, query)]
                cursor = server._rv
            else:
                cursor = int(rv_text)
                if cursor < server._compacted_rv:
                    pending = [("ERROR", status_obj(410, "Expired", f"too old resource version: {cursor} "
                                                    f"({server._compacted_rv})"))]
                    cursor = -1
                else:
                    pending = []
        try:
            while True:
                for kind, obj in pending:
                    chunk({"type": kind, "object": obj})
                if cursor < 0:
                    break
                with server._lock:
                    while True:
                        fresh = [(rv, k, o) for rv, k, o in server._events if rv > cursor
                                 and o.get("kind", res.kind) == res.kind and o["metadata"].get("namespace") == ns
                                 and want in (None, o["metadata"]["name"])]
                        if fresh or server._stopping or time.monotonic() >= deadline:
                            break
                        server._lock.wait(min(0.5, max(0.0, deadline - time.monotonic())))
                    if fresh:
                        cursor = fresh[-1][0]
                    elif server._events:
                        cursor = max(cursor, server._events[-1][0])
                pending = [(k, o) for _, k, o in fresh]
                if not pending and (server._stopping or time.monotonic() >= deadline):
                    break
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionError, OSError):
            h.close_connection = True

    def logs_route(h: Any, ns: str, name: str, query: dict[str, str]) -> None:
        if forbidden(h, "get", "pods/log", "", ns, name):
            return
        with server._lock:
            pod = server._pods.get((ns, name))
        if pod is None:
            h._fail(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            return
        names = [c["name"] for c in pod["spec"]["containers"]]
        container = query.get("container") or names[0]
        if container not in names:
            h._fail(400, "BadRequest", f"container {container} is not valid for pod {name}")
            return
        follow = query.get("follow") in ("true", "1")
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        with server._lock:
            lines = list(server._logs[(ns, name)])
        if tail is not None:
            lines = lines[-tail:] if tail else []
        if not follow:
            data = "".join(line + "\n" for line in lines).encode()
            h.send_response(200)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        sent = len(server._logs[(ns, name)]) - len(lines)
        try:
            while True:
                with server._lock:
                    all_lines = server._logs[(ns, name)]
                    new = all_lines[sent:]
                    sent = len(all_lines)
                    done = (ns, name) in server._log_done
                    if not new and not done and not server._stopping:
                        server._lock.wait(0.5)
                        continue
                for line in new:
                    data = (line + "\n").encode()
                    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                h.wfile.flush()
                if done or server._stopping:
                    with server._lock:
                        if len(server._logs[(ns, name)]) > sent:
                            continue
                    break
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionError, OSError):
            h.close_connection = True

    return Handler


def _parse_selector(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        out[key.strip()] = value.lstrip("=").strip()
    return out


def _matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
