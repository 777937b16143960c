#!/usr/bin/env python3
"""Generate the metal-emu C++ translation unit for one .metal file.

    msl_trampolines.py SRC.metal OUT.cpp [--display-name metal/SRC.metal]

The output compiles the kernel source, unchanged in meaning, as C++ through
csrc/emu/msl/msl_compat.hpp, inside its own namespace, with `#line` pointing back at the .metal
file so compiler errors and barrier sites name `metal/x.metal:LINE`. Rewrites (in memory; the
.metal file is never touched, and no rewrite adds or removes a line):

* `[[attributes]]` are parsed out of `kernel void` signatures and blanked everywhere.
* `threadgroup T name[N];` / `threadgroup T name;` storage becomes a reference into the
  current threadgroup's arena (poisoned with NaN, checked against 32 KiB); any other
  `threadgroup` (a pointer qualifier) is blanked.
* `1.0h` half literals become `((half)1.0f)`.

For every kernel it emits a trampoline that binds `[[buffer(n)]]` parameters from the
encoder's bindings and built-in attributes from the lane, plus a KernelInfo record listing
each buffer parameter with its access: `write` for a pointer/reference to non-const `device`
memory, `read` otherwise. The host-side hazard checker uses exactly this metadata.

Unsupported (rejected with an error naming file:line): template kernels, function constants,
textures/samplers, [[stage_in]], [[threadgroup(n)]] parameters.

Library mode (``generate_library``, called at run time by lmtail._ggml_metal for llama.cpp's
kernels) takes a foreign library's sources and the host names it needs, and additionally:

* inlines `#include "x"` (found next to the including file, then on the include path), once
  each, with `#line` markers so errors and barrier sites name the original file;
* takes template kernels and their `template [[host_name("n")]] kernel T f<args>;` instances,
  `[[host_name("n")]]` on plain kernels, buffer parameters without an attribute (the next
  free index, in declaration order, as the Metal compiler assigns them) and
  `[[threadgroup(n)]]` parameters (setThreadgroupMemoryLength);
* turns `constant T x [[function_constant(n)]];` into a read of the running pipeline's value;
* compiles only the kernels asked for: every other kernel (and its instances) is blanked, so
  the emulator needs only the MSL those kernels use;
* emits, instead of static registration, one exported `lmt_emu_library` entry point and the
  hook forwarders (the shared object is dlopen'ed by the emulator's newLibrary(path)).
"""

from __future__ import annotations

import argparse
import re
import sys

BUILTINS = {
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "threadgroup_position_in_grid",
    "threads_per_threadgroup",
    "threadgroups_per_grid",
    "threads_per_grid",
    "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup",
    "threads_per_simdgroup",
    "thread_execution_width",
}
BUILTIN_FIELD = {"thread_execution_width": "threads_per_simdgroup"}

KERNEL_RE = re.compile(r"\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(")
ATTR_RE = re.compile(r"\[\[(.*?)\]\]", re.S)
TG_ARRAY_RE = re.compile(r"\bthreadgroup\s+((?:[A-Za-z_][\w:]*\s+)*?[A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*\[([^\]]+)\]\s*;")
TG_SCALAR_RE = re.compile(r"\bthreadgroup\s+((?:[A-Za-z_][\w:]*\s+)*?[A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*;")
HALF_LIT_RE = re.compile(r"\b(\d+\.\d*|\.\d+|\d+)h\b")


class GenError(Exception):
    pass


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def blank(s: str) -> str:
    """Same length, newlines kept: rewrites never move a line."""
    return re.sub(r"[^\n]", " ", s)


def strip_comments(text: str) -> str:
    def repl(m: re.Match) -> str:
        return blank(m.group(0))

    return re.sub(r"//[^\n]*|/\*.*?\*/", repl, text, flags=re.S)


def split_params(s: str) -> list[tuple[str, int]]:
    out, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([<":
            depth += 1
        elif c in ")]>":
            depth -= 1
        elif c == "," and depth == 0:
            out.append((s[start:i], start))
            start = i + 1
    if s[start:].strip():
        out.append((s[start:], start))
    return out


def parse_kernels(code: str, display: str) -> list[dict]:
    kernels = []
    for m in KERNEL_RE.finditer(code):
        name = m.group(1)
        before = code[max(0, m.start() - 200) : m.start()]
        if re.search(r"template\s*<[^>]*>\s*$", before):
            raise GenError(f"{display}:{line_of(code, m.start())}: template kernel '{name}' is not supported")
        depth, i = 1, m.end()
        while depth:
            if i >= len(code):
                raise GenError(f"{display}:{line_of(code, m.start())}: unbalanced parameter list of '{name}'")
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        plist = code[m.end() : i - 1]
        params = []
        for raw, off in split_params(plist):
            where = f"{display}:{line_of(code, m.end() + off)}"
            attrs = [a.strip() for a in ATTR_RE.findall(raw)]
            decl = " ".join(ATTR_RE.sub(" ", raw).split())
            nm = re.search(r"([A-Za-z_]\w*)\s*$", decl)
            if not nm or len(attrs) != 1:
                raise GenError(f"{where}: parameter '{decl}' of kernel '{name}' needs exactly one [[attribute]]")
            pname, ptype = nm.group(1), decl[: nm.start()].strip()
            attr = attrs[0]
            if re.search(r"\b(texture\w*|sampler)\b", ptype) or attr.startswith(("stage_in", "threadgroup(", "function_constant")):
                raise GenError(f"{where}: parameter '{decl}' of kernel '{name}' is not supported by metal-emu")
            b = re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", attr)
            if b:
                words = re.findall(r"[A-Za-z_]\w*|[*&]", ptype)
                if "*" not in words and "&" not in words:
                    raise GenError(f"{where}: buffer parameter '{pname}' must be a pointer or reference")
                is_ref = ptype.rstrip().endswith("&")
                const = "const" in words or "constant" in words
                if "device" not in words and "constant" not in words:
                    raise GenError(f"{where}: buffer parameter '{pname}' needs an address space (device/constant)")
                params.append(
                    dict(kind="buffer", name=pname, type=ptype, index=int(b.group(1)), ref=is_ref, write=not const)
                )
            elif attr in BUILTINS:
                params.append(dict(kind="builtin", name=pname, type=ptype, attr=attr))
            else:
                raise GenError(f"{where}: unknown attribute [[{attr}]] on parameter '{pname}' of kernel '{name}'")
        idx = [p["index"] for p in params if p["kind"] == "buffer"]
        if len(idx) != len(set(idx)):
            raise GenError(f"{display}:{line_of(code, m.start())}: kernel '{name}' binds one buffer index twice")
        kernels.append(dict(name=name, params=params, line=line_of(code, m.start())))
    return kernels


# `T a[N] = { [ 0 ... N - 1 ] = v };`: a GNU range designator (Metal's clang takes it; in C++
# g++ reads `[...]` as a lambda). Only the whole-array form is rewritten, to a fill loop.
RANGE_INIT_RE = re.compile(
    r"(?P<decl>\b[A-Za-z_][\w:<>]*\s+(?P<name>[A-Za-z_]\w*)\s*\[(?P<n>[^\]\[]+)\])\s*=\s*"
    r"\{\s*\[\s*(?P<lo>[^\]\.]+?)\s*\.\.\.\s*(?P<hi>[^\]]+?)\s*\]\s*=\s*(?P<v>[^{};,]+?)\s*\}\s*;"
)


def range_init(m: re.Match, display: str, text: str) -> str:
    squash = lambda e: re.sub(r"\s+", "", e)  # noqa: E731
    if squash(m.group("lo")) != "0" or squash(m.group("hi")) != squash(m.group("n")) + "-1":
        raise GenError(f"{display}:{line_of(text, m.start())}: only a range designator over the whole array is "
                       f"supported by metal-emu")
    n, name = m.group("n"), m.group("name")
    new = f"{m.group('decl')}; for (int lmt_i_ = 0; lmt_i_ < ({n}); ++lmt_i_) {name}[lmt_i_] = {m.group('v')};"
    return new + "\n" * m.group(0).count("\n")


def rewrite(text: str, display: str, allow_fc: bool = False) -> str:
    if not allow_fc and re.search(r"\[\[\s*function_constant", text):
        raise GenError(f"{display}: function constants are not supported by metal-emu")

    def tg_array(m: re.Match) -> str:
        t, n, dim = m.group(1), m.group(2), m.group(3)
        key = f"{display}:{line_of(text, m.start())}:{n}"
        new = f'{t} (&{n})[{dim}] = ::lmt_msl::tg_array<{t}, ({dim})>("{key}");'
        return new + "\n" * m.group(0).count("\n")

    def tg_scalar(m: re.Match) -> str:
        t, n = m.group(1), m.group(2)
        key = f"{display}:{line_of(text, m.start())}:{n}"
        return f'{t} &{n} = ::lmt_msl::tg_scalar<{t}>("{key}");' + "\n" * m.group(0).count("\n")

    out = ATTR_RE.sub(lambda m: blank(m.group(0)), text)
    out = RANGE_INIT_RE.sub(lambda m: range_init(m, display, text), out)
    out = TG_ARRAY_RE.sub(tg_array, out)
    out = TG_SCALAR_RE.sub(tg_scalar, out)
    out = re.sub(r"\bthreadgroup\b(?!_)", " ", out)
    out = HALF_LIT_RE.sub(lambda m: f"((half){m.group(1)}f)" if "." in m.group(1) else f"((half){m.group(1)})", out)
    return out


def trampoline(k: dict, display: str) -> str:
    name = k["name"]
    args, infos = [], []
    for p in k["params"]:
        if p["kind"] == "buffer":
            if p["ref"]:
                t = f"std::remove_cv_t<std::remove_reference_t<{p['type']}>>"
                args.append(f'::lmt_msl::buffer_ref<{t}>(bind_, {p["index"]}, "{name}", "{p["name"]}")')
            else:
                args.append(f'::lmt_msl::buffer_ptr<{p["type"]}>(bind_, {p["index"]}, "{name}", "{p["name"]}")')
            acc = "Write" if p["write"] else "Read"
            infos.append(f'{{"{p["name"]}", "{p["type"]}", {p["index"]}, ::lmt::emu::Access::{acc}}}')
        else:
            field = BUILTIN_FIELD.get(p["attr"], p["attr"])
            args.append(f"::lmt_msl::builtin<{p['type']}>(b_.{field})")
    params = f"lmt_params_{name}" if infos else "nullptr"
    lines = []
    if infos:
        lines.append(f"static const ::lmt::emu::ParamInfo lmt_params_{name}[] = {{\n    " + ",\n    ".join(infos) + "};")
    lines.append(
        f"static void lmt_tramp_{name}(const ::lmt::emu::LaneBuiltins &b_, const ::lmt::emu::Bindings &bind_) {{\n"
        f"    (void)b_;\n    (void)bind_;\n    {name}(" + ",\n        ".join(args) + ");\n}"
    )
    lines.append(
        f'static const ::lmt::emu::KernelInfo lmt_info_{name} = {{"{name}", "{display}", &lmt_tramp_{name}, {params}, {len(infos)}}};'
    )
    lines.append(f"static const int lmt_reg_{name} = (::lmt::emu::register_kernel(&lmt_info_{name}), 0);")
    return "\n".join(lines)


# ---- library mode ------------------------------------------------------------------------------

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
FC_RE = re.compile(
    r"^[ \t]*constant[ \t]+(\w+)[ \t]+(\w+)[ \t]*\[\[\s*function_constant\s*\((.*?)\)\s*\]\][ \t]*;", re.M
)
INSTANCE_RE = re.compile(
    r'template\s*\[\[\s*host_name\s*\(\s*"([^"]+)"\s*\)\s*\]\]\s*kernel\s+\w+\s+(\w+)\s*<(.*?)>\s*;', re.S
)
HOST_NAME_RE = re.compile(r'\[\[\s*host_name\s*\(\s*"([^"]+)"\s*\)\s*\]\]\s*$')


def inline_includes(path: str, include_dirs: list[str], display_of, seen: set, depth: int = 0) -> str:
    if depth > 16:
        raise GenError(f"{display_of(path)}: includes nest deeper than 16")
    import os

    text = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once\b", "", open(path, encoding="utf-8").read(), flags=re.M)
    here = os.path.dirname(path)
    out, last = [], 0
    for m in INCLUDE_RE.finditer(text):
        name = m.group(1)
        found = next((os.path.join(d, name) for d in [here, *include_dirs] if os.path.isfile(os.path.join(d, name))), None)
        if found is None:
            raise GenError(f"{display_of(path)}:{line_of(text, m.start())}: include \"{name}\" not found")
        out.append(text[last : m.start()])
        key = os.path.realpath(found)
        if key not in seen:  # every header of this tree is include-once (#pragma once / guards)
            seen.add(key)
            body = inline_includes(found, include_dirs, display_of, seen, depth + 1)
            out.append(f'#line 1 "{display_of(found)}"\n{body}\n#line {line_of(text, m.end()) + 1} "{display_of(path)}"')
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def body_end(code: str, pos: int, display: str) -> int:
    """Index just past the `{...}` body that starts at or after pos."""
    i = code.index("{", pos)
    depth = 0
    while i < len(code):
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        i += 1
        if depth == 0:
            return i
    raise GenError(f"{display}:{line_of(code, pos)}: unbalanced kernel body")


def parse_params(code: str, start: int, end: int, name: str, display: str) -> list[dict]:
    params, explicit = [], set()
    raw_params = split_params(code[start:end])
    for raw, off in raw_params:
        b = re.search(r"\[\[\s*buffer\s*\(\s*(\d+)\s*\)\s*\]\]", raw)
        if b:
            explicit.add(int(b.group(1)))
    next_free = 0
    for i, (raw, off) in enumerate(raw_params):
        where = f"{display}:{line_of(code, start + off)}"
        attrs = [a.strip() for a in ATTR_RE.findall(raw)]
        decl = " ".join(ATTR_RE.sub(" ", raw).split())
        nm = re.search(r"([A-Za-z_]\w*)\s*$", decl)
        if not nm or len(attrs) > 1:
            raise GenError(f"{where}: parameter '{decl}' of kernel '{name}' needs at most one [[attribute]]")
        pname, ptype = nm.group(1), decl[: nm.start()].strip()
        words = re.findall(r"[A-Za-z_]\w*|[*&]", ptype)
        attr = attrs[0] if attrs else None
        if re.search(r"\b(texture\w*|sampler)\b", ptype) or (attr or "").startswith("stage_in"):
            raise GenError(f"{where}: parameter '{decl}' of kernel '{name}' is not supported by metal-emu")
        t = re.fullmatch(r"threadgroup\s*\(\s*(\d+)\s*\)", attr or "")
        b = re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", attr or "")
        if t:
            params.append(dict(kind="threadgroup", pos=i, name=pname, index=int(t.group(1))))
        elif b or attr is None:
            if ("*" not in words and "&" not in words) or ("device" not in words and "constant" not in words):
                raise GenError(f"{where}: parameter '{pname}' of kernel '{name}' is neither a buffer nor a built-in")
            if b:
                index = int(b.group(1))
            else:
                while next_free in explicit:
                    next_free += 1
                index = next_free
                explicit.add(index)
            const = "const" in words or "constant" in words
            params.append(dict(kind="buffer", pos=i, name=pname, type=ptype, index=index, write=not const))
        elif attr in BUILTINS:
            params.append(dict(kind="builtin", pos=i, name=pname, attr=attr))
        else:
            raise GenError(f"{where}: unknown attribute [[{attr}]] on parameter '{pname}' of kernel '{name}'")
    return params


def library_source(files: list[str], include_dirs: list[str], display_of, wanted: set) -> tuple[str, list, list]:
    """The combined source with unwanted kernels blanked, the kernels to emit, the constants."""
    seen: set = set()
    parts = []
    for f in files:
        parts.append(f'#line 1 "{display_of(f)}"\n' + inline_includes(f, include_dirs, display_of, seen))
    text = "\n".join(parts)
    code = strip_comments(text)
    cut = []  # (start, end) spans to blank
    defs = {}  # template kernel name -> params
    emit = []  # dict(host, fn, params)
    for m in KERNEL_RE.finditer(code):
        name = m.group(1)
        tm = re.search(r"template\s*<[^;{}]*>\s*$", code[max(0, m.start() - 300) : m.start()])
        hn = HOST_NAME_RE.search(code[max(0, m.start() - 300) : m.start()])
        start = m.start() - (len(tm.group(0)) if tm else len(hn.group(0)) if hn else 0)
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if code[i:].lstrip().startswith(";"):
            continue  # a declaration
        end = body_end(code, i, display_of(files[0]))
        host = hn.group(1) if hn else name
        if tm:
            defs[name] = (m.end(), i - 1, start, end)
        elif host in wanted:
            emit.append(dict(host=host, fn=name, params=parse_params(code, m.end(), i - 1, name, host)))
        else:
            cut.append((start, end))
    used = set()
    for m in INSTANCE_RE.finditer(code):
        host, fn, targs = m.group(1), m.group(2), " ".join(m.group(3).split())
        cut.append((m.start(), m.end()))
        if host in wanted and fn in defs:
            ps, pe = defs[fn][0], defs[fn][1]
            emit.append(dict(host=host, fn=f"{fn}<{targs}>", params=parse_params(code, ps, pe, fn, host)))
            used.add(fn)
    dropped = {fn for fn in defs if fn not in used}
    cut += [(defs[fn][2], defs[fn][3]) for fn in dropped]
    for m in re.finditer(r"typedef\s+decltype\s*\(\s*(\w+)\s*<[^;]*;", code):
        if m.group(1) in dropped:
            cut.append((m.start(), m.end()))
    # The kept instances' template arguments (a dequantizer template named as a function-pointer
    # argument) are uses too: their lines are cut, so they are passed along.
    cut += unused_templates(code, cut, display_of(files[0]), " ".join(e["fn"] for e in emit))
    missing = wanted - {e["host"] for e in emit}
    if missing:
        raise GenError("kernels not found in the library sources: " + ", ".join(sorted(missing)))
    fcs = [(m.group(1), m.group(2), m.group(3)) for m in FC_RE.finditer(code)]
    chars = list(text)
    for a, b in cut:
        chars[a:b] = list(blank(text[a:b]))
    text = "".join(chars)
    # `const constant T` (ggml's GGML_TABLE_BEGIN): one const in C++, where `constant` is const
    text = re.sub(r"\bconst(\s+)constant\b|\bconstant(\s+)const\b", lambda m: "constant" + (m.group(1) or m.group(2)) + "     ", text)
    text = FC_RE.sub(lambda m: f"#define {m.group(2)} (::lmt_msl::function_constant<{m.group(1)}>({m.group(3)}))", text)
    return text, emit, fcs


TEMPLATE_FN_RE = re.compile(r"^template\s*<[^;{}]*>\s*(?:(?:static|inline)\s+)*[A-Za-z_][\w:<>, ]*?[\s*&]+([A-Za-z_]\w*)\s*\(", re.M)


def unused_templates(code: str, cut: list, display: str, extra_uses: str = "") -> list:
    """Spans of top-level function templates that nothing kept refers to (to a fixpoint): the
    kernels left out need not compile, nor do the helpers only they use."""
    defs: dict = {}
    for m in TEMPLATE_FN_RE.finditer(code):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        j = i
        while j < len(code) and code[j] in " \t\n":
            j += 1
        if j < len(code) and code[j] == "{":
            defs.setdefault(m.group(1), []).append((m.start(), body_end(code, j, display)))
    mask = list(code)
    for a, b in cut:
        mask[a:b] = [" "] * (b - a)
    out = []
    changed = True
    while changed:
        changed = False
        kept = "".join(mask) + "\n" + extra_uses
        for name, spans in list(defs.items()):
            own = sum(len(re.findall(rf"\b{name}\b", kept[a:b])) for a, b in spans)
            if len(re.findall(rf"\b{name}\b", kept)) == own:
                for a, b in spans:
                    mask[a:b] = [" "] * (b - a)
                out += spans
                del defs[name]
                changed = True
    return out


def library_trampoline(i: int, k: dict) -> str:
    fn, host = k["fn"], k["host"]
    args, infos = [], []
    for p in k["params"]:
        a = f"::lmt_msl::fn_args<decltype(&{fn})>::at<{p['pos']}>"
        if p["kind"] == "buffer":
            args.append(f'::lmt_msl::bind_buffer<{a}>(bind_, {p["index"]}, "{host}", "{p["name"]}")')
            acc = "Write" if p["write"] else "Read"
            infos.append(f'{{"{p["name"]}", "{p["type"]}", {p["index"]}, ::lmt::emu::Access::{acc}}}')
        elif p["kind"] == "threadgroup":
            args.append(f'::lmt_msl::bind_threadgroup<{a}>(bind_, {p["index"]}, "{host}:[[threadgroup({p["index"]})]]")')
        else:
            field = BUILTIN_FIELD.get(p["attr"], p["attr"])
            args.append(f"::lmt_msl::builtin<{a}>(b_.{field})")
    params = f"lmt_params_{i}" if infos else "nullptr"
    lines = []
    if infos:
        lines.append(f"static const ::lmt::emu::ParamInfo lmt_params_{i}[] = {{\n    " + ",\n    ".join(infos) + "};")
    lines.append(
        f"static void lmt_tramp_{i}(const ::lmt::emu::LaneBuiltins &b_, const ::lmt::emu::Bindings &bind_) {{\n"
        f"    lmt_hooks = bind_.hooks;\n    {fn}(" + ",\n        ".join(args) + ");\n}"
    )
    lines.append(f'static const ::lmt::emu::KernelInfo lmt_info_{i} = {{"{host}", "{host}", &lmt_tramp_{i}, {params}, {len(infos)}}};')
    return "\n".join(lines)


LIBRARY_TAIL = """
// ---- hook forwarders and the entry point ----
// Every trampoline sets lmt_hooks from its bindings: the object may be loaded by more than one
// copy of the runtime (lmtail._core and the test-only module), each dispatch runs on its own.
#define g_hooks lmt_msl_lib::lmt_hooks
namespace lmt::emu {
void barrier(Site s) { g_hooks->barrier(s); }
SimdView simd_exchange(const void *v, size_t n, Site s) { return g_hooks->simd_exchange(v, n, s); }
void *tg_alloc(const char *key, size_t n, size_t a) { return g_hooks->tg_alloc(key, n, a); }
void kernel_fault(const std::string &m) {
    g_hooks->kernel_fault(m);
    __builtin_unreachable();
}
const void *function_constant(int i, size_t n) { return g_hooks->function_constant(i, n); }
}  // namespace lmt::emu
extern "C" __attribute__((visibility("default"))) int lmt_emu_library(const ::lmt::emu::Hooks *h,
                                                                      ::lmt::emu::LibraryTable *t) {
    if (h->version != ::lmt::emu::kHooksVersion) return -1;
    t->kernels = lmt_msl_lib::lmt_kernels;
    t->n_kernels = (int)(sizeof lmt_msl_lib::lmt_kernels / sizeof lmt_msl_lib::lmt_kernels[0]);
    t->fcs = lmt_msl_lib::lmt_fcs;
    t->n_fcs = %d;
    return ::lmt::emu::kHooksVersion;
}
"""


def generate_library(files: list[str], out: str, include_dirs: list[str], wanted: list[str], display_of) -> None:
    """One C++ translation unit (a shared object's) holding `wanted` kernels of a foreign library."""
    text, emit, fcs = library_source(files, include_dirs, display_of, set(wanted))
    body = rewrite(text, display_of(files[0]), allow_fc=True)
    parts = [
        "// Generated by msl_trampolines.py (library mode). Do not edit.",
        "#define LMT_MSL_FOREIGN 1",
        '#include "emu/msl/msl_compat.hpp"',
        "namespace lmt_msl_lib {",
        "thread_local const ::lmt::emu::Hooks *lmt_hooks = nullptr;",
        body,
        '#line 1 "generated trampolines"',
    ]
    parts += [library_trampoline(i, k) for i, k in enumerate(emit)]
    parts.append("const ::lmt::emu::KernelInfo *const lmt_kernels[] = {" + ", ".join(f"&lmt_info_{i}" for i in range(len(emit))) + "};")
    fc_rows = [f'{{"{n}", "{t}", (int)({e})}}' for t, n, e in fcs] or ['{"", "", -1}']
    parts.append("const ::lmt::emu::FcDecl lmt_fcs[] = {" + ", ".join(fc_rows) + "};")
    parts.append("}  // namespace lmt_msl_lib")
    parts.append(LIBRARY_TAIL % len(fcs))
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def generate(src: str, out: str, display: str) -> None:
    text = open(src, encoding="utf-8").read()
    code = strip_comments(text)
    kernels = parse_kernels(code, display)
    body = rewrite(text, display)
    stem = re.sub(r"\W", "_", display.rsplit("/", 1)[-1].rsplit(".", 1)[0])
    parts = [
        f"// Generated by tools/msl_trampolines.py from {display}. Do not edit.",
        '#include "emu/msl/msl_compat.hpp"',
        f"namespace lmt_msl_{stem} {{",
        f'#line 1 "{display}"',
        body,
        f'#line 1 "{out.replace(chr(92), "/")}"',
        "// ---- trampolines and metadata ----",
    ]
    parts += [trampoline(k, display) for k in kernels]
    parts.append(f"}}  // namespace lmt_msl_{stem}\n")
    new = "\n".join(parts)
    try:
        if open(out, encoding="utf-8").read() == new:
            return
    except OSError:
        pass
    with open(out, "w", encoding="utf-8") as f:
        f.write(new)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--display-name", default=None)
    a = ap.parse_args(argv)
    try:
        generate(a.src, a.out, a.display_name or a.src)
    except GenError as e:
        print(f"msl_trampolines: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
