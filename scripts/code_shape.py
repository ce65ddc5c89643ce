#!/usr/bin/env python3
"""Counts what docs/code_figures.md quotes about a folder's shape: function bodies longer than
--max-lines and classes with more than --max-members data members.

  scripts/code_shape.py [--max-lines 80] [--max-members 25] [--all] DIR...

How it counts (a brace-matching pass over .h/.cc files, comments and string literals blanked):
  - a function is a `{` whose preceding text, back to the last `;`, `{` or `}`, ends in `)`
    (optionally followed by const/noexcept/override/final/-> type/: initializers) and does not
    start with a control keyword (if/for/while/switch/catch) or a lambda's `]`; its length is the
    number of lines from its `{` to the matching `}`, both included;
  - a class is `class|struct Name ... {`; its data members are the declarations at its own brace
    depth that end in `;` and are not functions (no `(` before `=`/`{`/`;`), using, typedef,
    friend, static members, or nested types (which count on their own); GUARDED_BY(...) is
    left out before looking for a `(`.
Prints one line per finding and exits 1 when there is any (so a CI step can use it); --all lists
every function and class with its count instead.
"""
import argparse
import pathlib
import re
import sys

CONTROL = re.compile(r'^\s*(if|for|while|switch|catch|do|else|try|return)\b')
CLASS = re.compile(r'\b(class|struct)\s+(?:\w+\s+)*?([A-Za-z_]\w*)\s*(?:final\s*)?(?::[^;{]*)?$', re.S)


def blank(text):
    """Comments and string/char literals become spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(')' + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j])); i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (j - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def head_before(text, pos):
    """The text before the `{` at pos, back to the last ; { or } (the declaration it opens)."""
    j = pos - 1
    depth = 0
    while j >= 0:
        ch = text[j]
        if ch == ')':
            depth += 1
        elif ch == '(':
            depth -= 1
        elif depth == 0 and ch in ';{}':
            break
        j -= 1
    return text[j + 1:pos]


def decl_before(text, pos):
    """The declaration that the `;` at pos ends, brace initializers (`x_{0}`) included."""
    j = pos - 1
    while j >= 0:
        ch = text[j]
        if ch == ')':
            j = text.rfind('(', 0, j)  # parameter lists hold no ; { }
        elif ch == '}':
            depth, k = 1, j - 1
            while k >= 0 and depth:
                depth += {'}': 1, '{': -1}.get(text[k], 0)
                k -= 1
            before = text[:k + 1].rstrip()
            if not before or not (before[-1].isalnum() or before[-1] in '_>'):
                break
            j = k
        elif ch in ';{':
            break
        j -= 1
    return text[j + 1:pos]


def is_function(head):
    h = ' '.join(head.split())
    if not h or CONTROL.match(h) or h.endswith(']') or '](' in h.replace(' ', '') and h.rstrip().endswith(')') and '[' in h.split('(')[0]:
        return False
    if re.search(r'\b(class|struct|enum|namespace|union)\b', h.split('(')[0]):
        return False
    if h.startswith('=') or h.endswith('='):
        return False
    # a constructor's initializer list: cut at the top-level ' : ' after the parameter list
    m = re.search(r'\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s*&]+)?\s*$', h)
    if m:
        return '(' in h and not re.search(r'\[[^\]]*\]\s*(\([^)]*\))?\s*(mutable\s*)?(->[^{]*)?$', h)
    m = re.search(r'\)\s*(noexcept\s*)?:\s*[\w:]+[({]', h)
    return bool(m)


def name_of(head):
    h = ' '.join(head.split())
    depth, j = 0, len(h) - 1
    # the name is the identifier before the parameter list's '('
    k = h.find('(')
    while k > 0:
        m = re.search(r'([~\w:]+|operator\s*\S+)\s*$', h[:k])
        if m and not CONTROL.match(m.group(1)):
            return m.group(1)
        k = h.find('(', k + 1)
    return h[:40]


def scan(path, max_lines, max_members, list_all):
    raw = path.read_text(errors='replace')
    text = blank(raw)
    line_at = [0] * (len(text) + 1)
    ln = 1
    for i, ch in enumerate(text):
        line_at[i] = ln
        if ch == '\n':
            ln += 1
    findings = []
    stack = []  # (pos, kind, name)
    members = {}  # class open pos -> count
    for i, ch in enumerate(text):
        if ch == '{':
            head = head_before(text, i)
            kind, name = 'block', ''
            outer = [s for s in stack if s[1] in ('function', 'lambda')]
            cm = CLASS.search(' '.join(head.split()))
            if cm and not outer and not re.search(r'\benum\s+(class|struct)\b', head) and '(' not in head.split('class')[-1].split('struct')[-1].split(':')[0]:
                kind, name = 'class', cm.group(2)
                members[i] = 0
            elif not outer and is_function(head):
                kind, name = 'function', name_of(head)
            stack.append((i, kind, name))
        elif ch == '}':
            if not stack:
                continue
            pos, kind, name = stack.pop()
            if kind == 'function':
                n = line_at[i] - line_at[pos] + 1
                if list_all or n > max_lines:
                    findings.append((n, f'{path}:{line_at[pos]}: function {name}: {n} lines'))
            elif kind == 'class':
                n = members.pop(pos)
                if list_all or n > max_members:
                    findings.append((n, f'{path}:{line_at[pos]}: class {name}: {n} data members'))
        elif ch == ';' and stack and stack[-1][1] == 'class':
            decl = ' '.join(decl_before(text, i).split())
            decl = re.sub(r'^(public|private|protected)\s*:\s*', '', decl)
            if not decl or re.match(r'(using|typedef|friend|template|static_assert|enum|class|struct)\b', decl):
                continue
            decl = re.sub(r'\b(PT_)?GUARDED_BY\([^)]*\)', '', decl)
            before_init = re.split(r'=|\{', decl)[0]
            if '(' in before_init and not re.search(r'\bstd::function<|FunctionRef<', before_init):
                continue
            if re.match(r'static\s+constexpr\b', decl) or re.match(r'static\b', decl):
                continue  # not per object
            members[stack[-1][0]] += 1
    return findings


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--max-lines', type=int, default=80)
    ap.add_argument('--max-members', type=int, default=25)
    ap.add_argument('--all', action='store_true')
    ap.add_argument('dirs', nargs='+')
    a = ap.parse_args()
    found = []
    for d in a.dirs:
        for p in sorted(pathlib.Path(d).rglob('*')):
            if p.suffix in ('.h', '.cc', '.cpp', '.hpp') and p.is_file():
                found += scan(p, a.max_lines, a.max_members, a.all)
    for _, line in sorted(found, key=lambda f: -f[0]) if a.all else found:
        print(line)
    return 0 if a.all or not found else 1


if __name__ == '__main__':
    sys.exit(main())
