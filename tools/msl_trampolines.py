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


def rewrite(text: str, display: str) -> str:
    if re.search(r"\[\[\s*function_constant", text):
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
