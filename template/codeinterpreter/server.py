#!/usr/bin/env python3
"""The code-interpreter server of tupper's code-interpreter template.

It speaks E2B's Code Interpreter protocol on port 49999, as E2B's SDKs
(@e2b/code-interpreter, e2b_code_interpreter) read it:

  GET    /health                 200 (with ?ready=1: once the default Python context answers)
  POST   /execute                {code, context_id?, language?, env_vars?} -> newline-delimited JSON
  POST   /contexts               {language?, cwd?} -> {id, language, cwd}
  GET    /contexts               [{id, language, cwd}, ...]
  DELETE /contexts/{id}
  POST   /contexts/{id}/restart

A context is an interpreter with its language and working directory: a Jupyter kernel
(jupyter_client) for Python, a Node.js process of kernel.js for JavaScript; its variables live
until it is restarted or removed. The lines of /execute are
{"type": "stdout"|"stderr", "text"}, {"type": "result", "is_main_result", "text", "html", ...},
{"type": "error", "name", "value", "traceback"}, {"type": "number_of_executions",
"execution_count"} and a last {"type": "end_of_execution"}. A client that goes away (the SDK's
timeoutMs) interrupts the run, and the context stays usable; a kernel that dies is reported as
an error and restarted on the next run; output past TUPPER_CODE_OUTPUT_LIMIT bytes is dropped
after one marker. The server trusts its callers: tupper's server checks the sandbox's
credential before a request reaches it (docs/code-interpreter.md).
"""

import base64
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client.manager import KernelManager

os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # the debugger's warning on every kernel start

PORT = int(os.environ.get("TUPPER_CODE_PORT", "49999"))
OUTPUT_LIMIT = int(os.environ.get("TUPPER_CODE_OUTPUT_LIMIT", str(16 << 20)))
HOME = os.environ.get("HOME") or "/home/user"
DEFAULT_CWD = HOME if os.path.isdir(HOME) else os.getcwd()

# The languages of contexts: Python in a Jupyter kernel, JavaScript in a Node.js process of
# kernel.js (Debian packages no Jupyter kernel for it).
LANGUAGES = ("python", "javascript")
ALIASES = {"python3": "python", "py": "python", "ipython": "python", "js": "javascript", "node": "javascript", "nodejs": "javascript"}
KERNEL_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.js")

CHART_MIME = "application/vnd.tupper.chart+json"

# Run in every new Python kernel: matplotlib figures are also formatted as chart data
# (CHART_MIME), read from the figure's artists.
PYTHON_SETUP = r'''
def __tupper_setup():
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter

    class ChartFormatter(BaseFormatter):
        format_type = %(mime)r
        print_method = "_repr_tupper_chart_"
        _return_type = (dict,)

        # Not a registered printer: the inline backend removes every formatter's printer of
        # Figure when pyplot is first imported (IPython's select_figure_formats).
        def lookup_by_type(self, typ):
            for c in getattr(typ, "__mro__", ()):
                if c.__module__ == "matplotlib.figure" and c.__name__ == "Figure":
                    return figure_chart
            raise KeyError(typ)

    def num(v):
        try:
            f = float(v)
            return int(f) if f.is_integer() else f
        except Exception:
            return str(v)

    def labels(ticks):
        return [t.get_text() for t in ticks]

    def axes_chart(ax):
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge
        from matplotlib.collections import PathCollection
        c = {"title": ax.get_title(), "x_label": ax.get_xlabel() or None, "y_label": ax.get_ylabel() or None}
        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        bars = [b for b in ax.containers if isinstance(b, BarContainer)]
        if wedges:
            texts = [t.get_text() for t in ax.texts]
            c.update(type="pie", elements=[{"label": texts[i] if i < len(texts) else str(i),
                "angle": num(w.theta2 - w.theta1), "radius": num(w.r)} for i, w in enumerate(wedges)])
            c.pop("x_label"), c.pop("y_label")
            return c
        if bars:
            ticks = {round(float(t), 6): l.get_text() for t, l in zip(ax.get_xticks(), ax.get_xticklabels())}
            els = []
            for b in bars:
                group = b.get_label() or ""
                if group.startswith("_"):
                    group = ""
                for r in b.patches:
                    x = r.get_x() + r.get_width() / 2
                    els.append({"label": ticks.get(round(x, 6), str(num(x))), "value": num(r.get_height()), "group": group})
            c.update(type="bar", elements=els)
            return c
        lines = [l for l in ax.get_lines() if not l.get_label().startswith("_child") or len(l.get_xdata())]
        scatter = [p for p in ax.collections if isinstance(p, PathCollection)]
        if not lines and not scatter:
            return None
        if lines:
            els = [{"label": l.get_label(), "points": [[num(x), num(y)] for x, y in zip(l.get_xdata(), l.get_ydata())]} for l in lines]
            kind = "line"
        else:
            els = [{"label": p.get_label(), "points": [[num(x), num(y)] for x, y in p.get_offsets()]} for p in scatter]
            kind = "scatter"
        c.update(type=kind, elements=els,
            x_ticks=[num(t) for t in ax.get_xticks()], x_tick_labels=labels(ax.get_xticklabels()), x_scale=ax.get_xscale(),
            y_ticks=[num(t) for t in ax.get_yticks()], y_tick_labels=labels(ax.get_yticklabels()), y_scale=ax.get_yscale())
        return c

    def figure_chart(fig):
        try:
            charts = [c for c in (axes_chart(ax) for ax in fig.axes) if c]
        except Exception:
            return None
        if not charts:
            return None
        if len(charts) == 1:
            return charts[0]
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
        return {"type": "superchart", "title": title, "elements": charts}

    ip = get_ipython()
    f = ChartFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters[f.format_type] = f

__tupper_setup()
del __tupper_setup
''' % {"mime": CHART_MIME}

# Display data's MIME types and the result's fields E2B's SDKs read them from.
FIELDS = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
    "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf",
    "text/latex": "latex", "application/json": "json", "application/javascript": "javascript",
    CHART_MIME: "chart",
}


class Dead(Exception):
    """The kernel died during a run."""


class Context:
    """A context: its language, working directory and interpreter, one run at a time."""

    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()  # one run at a time
        self.dead = False

    def json(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def restart(self):
        """Replaces the interpreter with a new one: its variables are gone."""
        self.shutdown()
        self.start()


class PythonContext(Context):
    """A Jupyter kernel (ipykernel)."""

    km = None
    kc = None

    def start(self):
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=self.cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.silent(PYTHON_SETUP)
        self.dead = False

    def shutdown(self):
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception:
            try:
                self.km.cleanup_resources()
            except Exception:
                pass

    def silent(self, code):
        """Runs code without output or history, and waits for it."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if not self.km.is_alive():
                    raise Dead()
                continue
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status" \
                    and msg["content"]["execution_state"] == "idle":
                return

    def exit_status(self):
        p = getattr(getattr(self.km, "provisioner", None), "process", None)
        return p.poll() if p is not None else None

    def execute(self, run, code, env):
        """Runs code, sending its output to run; returns its execution count."""
        count = None
        if env:
            keys = json.dumps(sorted(env))
            self.silent("import os as __t_os\n__t_saved = {k: __t_os.environ.get(k) for k in %s}\n__t_os.environ.update(%s)\n" % (keys, json.dumps(env)))
        try:
            # Not stop_on_error: after an error ipykernel aborts the execute requests that reach it
            # before its next loop turn, and the next run (sent once this one is idle) may be one.
            msg_id = self.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
            interrupted = False
            alive_check = time.monotonic()
            while True:
                try:
                    msg = self.kc.get_iopub_msg(timeout=0.05)
                except queue.Empty:
                    if not interrupted and run.client_gone():
                        self.km.interrupt_kernel()
                        interrupted = True
                    if time.monotonic() - alive_check > 0.5:
                        alive_check = time.monotonic()
                        if not self.km.is_alive():
                            raise Dead()
                    continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                t, c = msg["msg_type"], msg["content"]
                if t == "stream":
                    run.line({"type": "stdout" if c.get("name") == "stdout" else "stderr", "text": c.get("text", ""), "timestamp": now()})
                elif t in ("execute_result", "display_data"):
                    run.result(c, t == "execute_result")
                elif t == "error":
                    run.error(c.get("ename", ""), c.get("evalue", ""), "\n".join(c.get("traceback") or []))
                elif t == "execute_input":
                    count = c.get("execution_count")
                elif t == "status" and c.get("execution_state") == "idle":
                    break
                if not interrupted and run.gone:
                    self.km.interrupt_kernel()
                    interrupted = True
        finally:
            if env and self.km.is_alive():
                self.silent("for __t_k, __t_v in __t_saved.items():\n    __t_os.environ.pop(__t_k, None) if __t_v is None else __t_os.environ.__setitem__(__t_k, __t_v)\ndel __t_saved, __t_k, __t_v\n")
        return count


class JavaScriptContext(Context):
    """A Node.js process running kernel.js."""

    proc = None

    def start(self):
        self.proc = subprocess.Popen(["node", KERNEL_JS], cwd=self.cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        msg = self.lines.get(timeout=60)
        if msg is None or msg.get("type") != "ready":
            raise RuntimeError("the JavaScript context did not start")
        self.dead = False

    @staticmethod
    def _read(proc, lines):
        for raw in proc.stdout:
            try:
                lines.put(json.loads(raw))
            except ValueError:
                continue
        lines.put(None)  # the process ended

    def shutdown(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def exit_status(self):
        return self.proc.poll()

    def execute(self, run, code, env):
        try:
            self.proc.stdin.write((json.dumps({"code": code, "env": env}) + "\n").encode())
        except OSError:
            raise Dead()
        interrupted = False
        while True:
            try:
                msg = self.lines.get(timeout=0.05)
            except queue.Empty:
                if not interrupted and run.client_gone():
                    self.proc.send_signal(signal.SIGINT)
                    interrupted = True
                continue
            if msg is None:
                raise Dead()
            t = msg.get("type")
            if t in ("stdout", "stderr"):
                run.line({"type": t, "text": msg.get("text", ""), "timestamp": now()})
            elif t == "result":
                run.result({"data": {"text/plain": msg.get("text", "")}}, True)
            elif t == "error":
                run.error(msg.get("name", ""), msg.get("value", ""), msg.get("traceback", ""))
            elif t == "done":
                return msg.get("count")
            if not interrupted and run.gone:
                self.proc.send_signal(signal.SIGINT)
                interrupted = True


CONTEXTS = {"python": PythonContext, "javascript": JavaScriptContext}


contexts = {}
defaults = {}  # language -> the context a run without context_id uses
contexts_lock = threading.Lock()
ready = threading.Event()


def new_context(language, cwd):
    c = CONTEXTS[language](language, cwd)
    c.start()
    with contexts_lock:
        contexts[c.id] = c
    return c


def default_context(language):
    with contexts_lock:
        c = defaults.get(language)
        if c is not None:
            return c
    c = new_context(language, DEFAULT_CWD)
    with contexts_lock:
        if language in defaults:  # made meanwhile
            contexts.pop(c.id, None)
            c.shutdown()
            return defaults[language]
        defaults[language] = c
    return c


def language_of(name):
    name = (name or "python").lower()
    name = ALIASES.get(name, name)
    if name not in LANGUAGES:
        raise ValueError("language %r has no kernel in this template (it has: %s)" % (name, ", ".join(LANGUAGES)))
    return name


class Run:
    """One /execute: sends the kernel's messages to the client as E2B's lines."""

    def __init__(self, handler):
        self.h = handler
        self.sent = 0
        self.truncated = False
        self.gone = False

    def line(self, obj, count=True):
        if self.gone:
            return
        data = (json.dumps(obj) + "\n").encode()
        if count:
            if self.truncated:
                return
            if self.sent + len(data) > OUTPUT_LIMIT:
                room = OUTPUT_LIMIT - self.sent - 300
                if obj.get("type") in ("stdout", "stderr") and room > 0:
                    self.line(dict(obj, text=obj["text"][:room // 6]))  # JSON escapes may grow it sixfold
                self.truncated = True
                data = (json.dumps({"type": "stderr", "text": "\n[output truncated: this run's output passed %d bytes; the rest is dropped]\n" % OUTPUT_LIMIT, "timestamp": now()}) + "\n").encode()
            self.sent += len(data)
        try:
            self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.h.wfile.flush()
        except OSError:
            self.gone = True

    def client_gone(self):
        if self.gone:
            return True
        try:
            r, _, _ = select.select([self.h.connection], [], [], 0)
            if r and self.h.connection.recv(1, socket.MSG_PEEK) == b"":
                self.gone = True
        except OSError:
            self.gone = True
        return self.gone

    def result(self, content, main):
        out = {"type": "result", "is_main_result": main}
        notes = []
        for mime, value in (content.get("data") or {}).items():
            field = FIELDS.get(mime)
            ok = isinstance(value, (dict, list)) if field in ("json", "chart") else isinstance(value, str)
            if field in ("png", "jpeg", "pdf") and ok:
                try:
                    base64.b64decode("".join(value.split()), validate=True)
                except Exception:
                    ok = False
            if not ok:
                notes.append(mime)
                continue
            if field is None:
                out.setdefault("extra", {})[mime] = value
            else:
                out[field] = value
        if notes:
            self.line({"type": "stderr", "text": "[a result's %s data was malformed and is skipped]\n" % ", ".join(notes), "timestamp": now()})
        if len(out) > 2:
            self.line(out)

    def error(self, name, value, traceback):
        self.line({"type": "error", "name": name, "value": value, "traceback": traceback}, count=False)

    def execute(self, ctx, code, env):
        if ctx.dead:
            ctx.restart()
        try:
            count = ctx.execute(self, code, env)
        except Dead:
            ctx.dead = True
            self.error("KernelDied", "the kernel of this context died (exit status %s); it restarts on the next run, without its variables" % ctx.exit_status(), "")
            return
        if count is not None:
            self.line({"type": "number_of_executions", "execution_count": count}, count=False)
        self.line({"type": "end_of_execution"}, count=False)


def now():
    return time.time_ns() // 1000


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tupper-code-interpreter"

    def setup(self):
        super().setup()
        # Each line goes out as it comes: without this, Nagle's algorithm holds a small
        # chunk until the client's delayed ACK, 40 ms a cell.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body=None, ctype="application/json"):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, status, msg):
        self.reply(status, (msg + "\n").encode(), "text/plain; charset=utf-8")

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n == 0:
            return {}
        b = json.loads(self.rfile.read(n) or b"{}")
        if not isinstance(b, dict):
            raise ValueError("the body is not a JSON object")
        return b

    def path_parts(self):
        return [p for p in self.path.split("?", 1)[0].split("/") if p]

    def do_GET(self):
        parts = self.path_parts()
        if parts == ["health"]:
            if "ready=1" in self.path and not ready.is_set():
                return self.fail(503, "the default Python context is starting")
            return self.reply(200, "OK")
        if parts == ["contexts"]:
            with contexts_lock:
                return self.reply(200, [c.json() for c in contexts.values()])
        self.fail(404, "no such path")

    def do_DELETE(self):
        parts = self.path_parts()
        if len(parts) == 2 and parts[0] == "contexts":
            with contexts_lock:
                c = contexts.pop(parts[1], None)
                for lang, d in list(defaults.items()):
                    if d is c:
                        del defaults[lang]
            if c is None:
                return self.fail(404, "context %s not found" % parts[1])
            c.shutdown()
            return self.reply(204)
        self.fail(404, "no such path")

    def do_POST(self):
        parts = self.path_parts()
        try:
            req = self.body()
        except ValueError as e:
            return self.fail(400, "bad request body: %s" % e)
        if parts == ["execute"]:
            return self.execute(req)
        if parts == ["contexts"]:
            try:
                lang = language_of(req.get("language"))
            except ValueError as e:
                return self.fail(400, str(e))
            cwd = req.get("cwd") or DEFAULT_CWD
            if not os.path.isdir(cwd):
                return self.fail(400, "cwd %s is not a directory" % cwd)
            c = new_context(lang, cwd)
            return self.reply(200, c.json())
        if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
            with contexts_lock:
                c = contexts.get(parts[1])
            if c is None:
                return self.fail(404, "context %s not found" % parts[1])
            with c.lock:
                c.restart()
            return self.reply(204)
        self.fail(404, "no such path")

    def execute(self, req):
        code = req.get("code")
        if not isinstance(code, str):
            return self.fail(400, "code is required")
        env = req.get("env_vars") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return self.fail(400, "env_vars must map names to strings")
        cid = req.get("context_id")
        if cid:
            with contexts_lock:
                ctx = contexts.get(cid)
            if ctx is None:
                return self.fail(404, "context %s not found" % cid)
        else:
            try:
                ctx = default_context(language_of(req.get("language")))
            except ValueError as e:
                return self.fail(400, str(e))
        with ctx.lock:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            run = Run(self)
            try:
                run.execute(ctx, code, env)
            except Exception as e:
                run.line({"type": "error", "name": type(e).__name__, "value": "the code-interpreter server failed: %s" % e, "traceback": ""}, count=False)
            if not run.gone:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
            else:
                self.close_connection = True


def main():
    srv = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    srv.daemon_threads = True

    def warm():
        try:
            default_context("python")
            ready.set()
        except Exception as e:
            print("the default Python context did not start: %s" % e, file=sys.stderr)
            ready.set()  # runs start one themselves

    threading.Thread(target=warm, daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
