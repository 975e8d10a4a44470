# Generates the expected outputs of tests/unit/chat_template/engine_cases.inc with jinja2 (the
# same environment transformers uses). Run: python3 gen_engine_cases.py > engine_cases.inc
import json, os, subprocess, sys
V = {"d": {"a": 1, "b": [1, 2], "items": "x"}, "users": [{"name": "al", "active": True}, {"name": "bob", "active": False}],
     "messages": [{"role": "user", "content": "Hello  "}, {"role": "assistant", "content": "Hi"}]}
C = [
 # --- whitespace control (trim_blocks + lstrip_blocks) ---
 ("ws_plain_text", "hello\nworld"),
 ("ws_trailing_newline_dropped", "a\n"),
 ("ws_crlf_normalized", "a\r\nb\rc"),
 ("ws_lstrip_and_trim_block", "  {% if true %}\n    yes\n  {% endif %}\nend"),
 ("ws_minus_both_sides", "a  {%- if true -%}  b  {%- endif -%}  c"),
 ("ws_trim_after_block", "{% if true %}\nx\n{% endif %}\ny"),
 ("ws_comment_trim", "{#- comment -#}  x {# c #}\ny"),
 ("ws_variable_not_lstripped", "  {{ 'x' }}  \n  {% set a = 1 %}\n  z"),
 ("ws_plus_disables_lstrip", "a\n  {%+ if true %}b{% endif %}"),
 ("ws_plus_disables_trim", "{% if true +%}\nx{% endif %}"),
 ("ws_variable_minus", "a \n {{- 'b' -}} \n c"),
 ("ws_block_not_at_line_start", "a {% if true %}b{% endif %} c"),
 ("ws_raw", "{% raw %}{{ x }}{% endraw %}"),
 ("ws_raw_with_strip", "  {% raw -%}  a {{ b }}  {%- endraw %}  c"),
 ("ws_nested_blocks", "{% for i in range(2) %}\n  {% if i %}\n    odd\n  {% else %}\n    even\n  {% endif %}\n{% endfor %}\n"),
 ("ws_comment_lstrip", "a\n    {# note #}\nb"),
 # --- statements ---
 ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}"),
 ("for_loop_vars", "{% for i in range(4) %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}"),
 ("for_prev_next", "{% for i in range(4) %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"),
 ("for_filtered", "{% for i in range(6) if i is odd %}{{ i }}@{{ loop.index }}/{{ loop.length }} {% endfor %}"),
 ("for_else", "{% for i in [] %}x{% else %}empty{% endfor %}"),
 ("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
 ("for_over_dict_keys", "{% for k in d %}{{ k }}{% endfor %}"),
 ("for_over_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}"),
 ("for_over_undefined", "{% for x in nothing %}x{% endfor %}ok"),
 ("for_break_continue", "{% for i in range(10) %}{% if i == 3 %}{% continue %}{% endif %}{% if i == 6 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
 ("for_nested_loop_var", "{% for a in [[1, 2], [3]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }}|{% endfor %}"),
 ("for_cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
 ("set_in_loop_does_not_leak", "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }},{% endfor %}{{ x }}"),
 ("set_in_if_leaks", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}"),
 ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}"),
 ("set_block", "{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]"),
 ("set_block_filter", "{% set x | upper %}block{% endset %}[{{ x }}]"),
 ("namespace_mutation", "{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}"),
 ("namespace_list_append_via_plus", "{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }}"),
 ("macro_defaults", "{% macro m(a, b=2, c='z') %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c=5) }}|{{ m() }}"),
 ("macro_recursive", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
 ("macro_varargs_kwargs", "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}"),
 ("macro_local_set", "{% macro m() %}{% set v = 'in' %}{{ v }}{% endmacro %}{% set v = 'out' %}{{ m() }}{{ v }}"),
 ("macro_sees_globals", "{% macro m() %}{{ d.a }}{% endmacro %}{{ m() }}"),
 ("macro_returns_string", "{% macro m() %}abc{% endmacro %}{{ m()|length }}{{ m() ~ 'd' }}"),
 ("call_block", "{% macro m(a) %}[{{ caller() }}|{{ a }}]{% endmacro %}{% call m(1) %}inner{% endcall %}"),
 ("call_block_args", "{% macro m() %}{{ caller(3) }}{% endmacro %}{% call(n) m() %}n={{ n }}{% endcall %}"),
 ("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}"),
 ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
 ("generation_block", "{% generation %}gen {{ 1 }}{% endgeneration %}"),
 # --- expressions ---
 ("arith", "{{ 1 + 2 }}|{{ 1 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 2**3**2 }}|{{ 3 * 1.5 }}|{{ 4 / 2 }}"),
 ("float_printing", "{{ 1e20 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }} {{ 3.0 * 2 }}"),
 ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ nothing ~ [1] }}"),
 ("literals_repr", "{{ [1, 'a', 1.5, none, true, {'k': (1, 2)}, (1,)] }}|{{ () }}{{ [] }}{{ {} }}"),
 ("string_literals", "{{ \"it's\" }}{{ 'say \"hi\"' }}{{ '\\u00e9\\x41\\101' }}{{ ['it\\'s', 'a\"b', \"\\n\"] }}{{ 'a' 'b' }}"),
 ("number_literals", "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 2E-2 }}"),
 ("constants", "{{ true }}{{ True }}{{ none }}{{ None }}{{ false }}{{ False }}"),
 ("attr_and_item", "{{ d.a }}{{ d['b'] }}{{ d.b[1] }}{{ d.b.0 }}[{{ d.zz }}]{{ messages[0].role }}{{ messages[-1]['content'] }}"),
 ("dict_attr_prefers_method", "{{ d['items'] }}|{{ d.items()|list }}"),
 ("slices", "{{ 'abc'[::-1] }}{{ [1,2,3][::-1] }}{{ [1,2,3,4,5][1:3] }}{{ 'hello'[1:] }}{{ 'hello'[-2:] }}{{ [1,2,3][:-1] }}{{ 'héllo'[1] }}{{ 'héllo'[::2] }}{{ [1,2,3,4,5][::2] }}{{ [1,2,3][5:] }}"),
 ("comparisons", "{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ [1, 2] < [1, 3] }}{{ 'a' < 'b' }}{{ 2 >= 2 }}{{ true == 1 }}"),
 ("membership", "{{ 1 in [1, 2] }}{{ 3 not in [1, 2] }}{{ 'a' in 'abc' }}{{ 'a' in {'a': 1} }}{{ 'z' in nothing }}{{ (1, 2) in [(1, 2)] }}"),
 ("logic", "{{ 1 and 2 }}{{ 0 and 2 }}{{ 0 or 'x' }}{{ not 0 }}{{ not [] }}{{ none or [] }}"),
 ("conditional_expr", "{{ 'a' if 1 else 'b' }}{{ 'a' if 0 else 'b' }}[{{ 'a' if 0 }}]{{ 1 if false else 2 if true else 3 }}"),
 ("unary", "{{ -1 }}{{ +1 }}{{ -(3) }}{{ - 2 ** 2 }}{{ -d.a }}"),
 ("precedence", "{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}{{ 2 * 3 ~ 4 }}{{ messages|length - 1 }}{{ not 1 == 2 }}{{ 1 + 1 is even }}"),
 ("list_concat_repeat", "{{ [1] + [2] }}{{ 'ab' * 3 }}{{ [0] * 3 }}{{ 3 * 'x' }}"),
 ("percent_format", "{{ 'a%sb%dc' % ('x', 5) }}{{ '%s' % 'q' }}{{ '%05.1f|%x' % (3.14159, 255) }}{{ '%s'|format(5) }}"),
 ("undefined_prints_empty", "[{{ nothing }}]{{ nothing is defined }}{{ nothing is undefined }}{{ nothing|length }}{{ nothing is iterable }}"),
 ("none_attr_is_undefined", "{{ (none).x is defined }}"),
 ("missing_attr_is_undefined", "{{ d.nope is defined }}{{ messages[5] is defined }}{{ 'ab'[7] is defined }}"),
 ("range", "{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}"),
 ("dict_and_namespace_globals", "{{ dict(a=1, b=2) }}{{ namespace(a=1).a }}{{ dict([('x', 1)]) }}"),
 ("strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %B %Y') }}"),
 # --- filters ---
 ("f_sort_unique_reverse", "{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}{{ [3,1,2]|sort(reverse=true) }}{{ ['a', 'A', 'b']|unique|list }}{{ [1,2,3]|reverse|list }}{{ 'abc'|reverse }}{{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join }}"),
 ("f_first_last_join_length", "{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ [1,2,3]|join(',') }}{{ [1,2,3]|length }}{{ 'abc'|length }}{{ {'a':1}|length }}{{ 'héllo'|count }}{{ users|join(', ', attribute='name') }}"),
 ("f_sum_min_max", "{{ [1,2,3]|sum }}{{ [1,2,3]|min }}{{ [1,2,3]|max }}{{ ['b', 'A']|min }}{{ users|sum(attribute='active') }}"),
 ("f_map_select", "{{ users|map(attribute='name')|join(', ') }}|{{ users|selectattr('active')|map(attribute='name')|list }}|{{ users|rejectattr('active')|map(attribute='name')|list }}|{{ users|selectattr('name', 'equalto', 'bob')|list }}|{{ users|map(attribute='age', default=0)|list }}"),
 ("f_select_reject", "{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('even')|list }}{{ ['a','b']|map('upper')|list }}{{ [1, 2, 3, 4]|select('divisibleby', 2)|list }}{{ [0, 1, '', 'x']|select|list }}{{ [1, 5, 9]|select('gt', 3)|list }}"),
 ("f_tojson", "{{ d|tojson }}|{{ [1, 'é', none, true, 1.5]|tojson }}|{{ 'a\"b\\\\c\\n'|tojson }}|{{ {}|tojson(indent=2) }}|{{ []|tojson }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}"),
 ("f_tojson_indent", "{{ d|tojson(indent=2) }}|{{ users|tojson(indent=1) }}|{{ d|tojson(indent='\\t') }}"),
 ("f_tojson_sort_keys", "{{ {'b': 1, 'a': {'d': 1, 'c': 2}}|tojson(sort_keys=true) }}"),
 ("f_string_case", "{{ '  x  '|trim }}|{{ 'xxyxx'|trim('x') }}|{{ 'hello world'|upper }}|{{ 'HeLLo'|lower }}|{{ 'hello-world foo'|title }}|{{ 'hello WORLD'|capitalize }}|{{ 'aXa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}"),
 ("f_default", "{{ nothing|default('d') }}{{ ''|default('d') }}{{ ''|default('d', true) }}{{ none|default('d') }}{{ nothing|d('e') }}{{ nothing|default }}"),
 ("f_numbers", "{{ '3'|int }}{{ '3.7'|int }}{{ 'x'|int }}{{ 'x'|int(5) }}{{ 3.9|int }}{{ '3.5'|float }}{{ 3|float }}{{ -3|abs }}{{ 3.14159|round(2) }}{{ 2.5|round }}{{ 3|round }}{{ 3.7|round(method='floor') }}{{ ' 42 '|int }}{{ '0x1A'|int(base=16) }}"),
 ("f_indent", "{{ 'a\\nb\\nc'|indent(2) }}|{{ 'a\\n\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}"),
 ("f_misc", "{{ 'one two  three'|wordcount }}|{{ [1,2,3,4,5]|batch(2)|list }}|{{ [1,2,3]|batch(2, 0)|list }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1, 'a': 2}|items|list }}|{{ 'ab'|list }}|{{ 5|string }}{{ [1]|string }}|{{ 'x'|center(5) }}|{{ '<a>'|e }}|{{ 'q'|safe }}|{{ d|attr('a') }}"),
 ("f_chained", "{{ messages|map(attribute='content')|map('trim')|join('/')|upper }}"),
 # --- tests ---
 ("t_types", "{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is sequence }}{{ 1 is iterable }}{{ none is none }}{{ nothing is none }}{{ range is callable }}"),
 ("t_booleans", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ true is boolean }}{{ 1 is boolean }}"),
 ("t_numeric", "{{ 1 is odd }}{{ 2 is even }}{{ 6 is divisibleby 3 }}{{ 7 is divisibleby(3) }}"),
 ("t_compare", "{{ 1 is eq 1 }}{{ 1 is equalto 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 2 is le 1 }}{{ 1 is in [1, 2] }}{{ 'a' is in 'abc' }}{{ none is sameas none }}"),
 ("t_strings", "{{ 'a' is lower }}{{ 'A' is upper }}{{ 'aB' is lower }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ 'nope' is filter }}"),
 ("t_negated", "{{ 1 is not odd }}{{ nothing is not defined }}{{ none is not none }}"),
 # --- methods ---
 ("m_strip", "{{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ '\\n\\nx\\n'.strip('\\n') }}"),
 ("m_split", "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'a,b'.rsplit(',') }}|{{ 'x</think>y'.split('</think>')[-1] }}|{{ 'a\\nb\\r\\nc'.splitlines() }}"),
 ("m_case_replace", "{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}{{ 'aaa'.replace('a', 'b', 2) }}{{ 'abc'.replace('', '-') }}{{ 'aB'.swapcase() }}"),
 ("m_search", "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}{{ 'abcb'.rfind('b') }}{{ 'abcb'.count('b') }}{{ '-'.join(['a', 'b']) }}"),
 ("m_predicates", "{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}{{ ''.isdigit() }}"),
 ("m_format", "{{ '{} and {}'.format(1, 'b') }}|{{ '{0}{0}{name}'.format('x', name='n') }}|{{ '{{}}{}'.format(1) }}"),
 ("m_dict", "{{ d.get('a') }}{{ d.get('q') }}{{ d.get('q', 5) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}"),
 ("m_list", "{{ [1, 2, 1].count(1) }}{{ [1, 2, 3].index(2) }}"),
 ("m_justify", "[{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4, '*') }}][{{ 'ab'.center(5) }}]"),
 # --- HF idioms ---
 ("hf_think_split", "{% set content = '<think>\\nreason\\n</think>\\n\\nanswer' %}{{ content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ content.split('</think>')[-1].lstrip('\\n') }}"),
 ("hf_reverse_scan", "{% set ns = namespace(idx=-1) %}{% for m in messages[::-1] %}{% if ns.idx == -1 and m.role == 'user' %}{% set ns.idx = (messages|length - 1) - loop.index0 %}{% endif %}{% endfor %}{{ ns.idx }}"),
 ("hf_content_is_string", "{% for m in messages %}{% if m.content is string %}{{ m.content|trim }}{% endif %}{% endfor %}"),
]
lines = [json.dumps({"template": t, "vars": V}, ensure_ascii=False) for _, t in C]
p = subprocess.run(["python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "jinja2_oracle.py")], input="\n".join(lines) + "\n", capture_output=True, text=True)
res = [json.loads(l) for l in p.stdout.splitlines()]
def cstr(s):
    out = '"'
    for ch in s:
        if ch == '\\': out += '\\\\'
        elif ch == '"': out += '\\"'
        elif ch == '\n': out += '\\n'
        elif ch == '\r': out += '\\r'
        elif ch == '\t': out += '\\t'
        elif ord(ch) < 0x20: raise ValueError("control char")
        else: out += ch
    return out + '"'
print("// Generated by the jinja2 oracle (ImmutableSandboxedEnvironment(trim_blocks=True,")
print("// lstrip_blocks=True) with transformers' tojson/strftime_now); see engine_test.cc.")
print("// {name, template, expected output}")
for (name, t), r in zip(C, res):
    if "ok" not in r:
        print("ERROR for", name, r, file=sys.stderr); continue
    print("{%s,\n %s,\n %s}," % (cstr(name), cstr(t), cstr(r["ok"])))
