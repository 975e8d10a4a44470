# HF-equivalent jinja2 environment oracle: reads JSON {"template":..., "vars":{...}} lines from stdin
import sys, json
from datetime import datetime
import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2 import nodes

class AssistantTracker(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_assistant", []), [], [], body).set_lineno(lineno)
    def _render_assistant(self, caller):
        return caller()

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

DATE = "2025-01-02"
def strftime_now(fmt):
    return datetime(2025, 1, 2, 13, 4, 5).strftime(fmt)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

for line in sys.stdin:
    if not line.strip(): continue
    req = json.loads(line)
    try:
        out = env.from_string(req["template"]).render(**req.get("vars", {}))
        print(json.dumps({"ok": out}, ensure_ascii=False))
    except Exception as e:
        print(json.dumps({"error": type(e).__name__ + ": " + str(e)}, ensure_ascii=False))
