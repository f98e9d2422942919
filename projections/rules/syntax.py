"""Parse RDFox-style rule files into a small AST.

    PREFIX : <https://engram.dev/ns#>
    #@explain "below: {kpi} against goal {goal}"
    [?m, :targetStatus, "below"] :- [?m, a, :PerformanceTargetMemory], [?m, :goal, ?goal],
        NOT [?m, :supersededBy, ?x], FILTER(?v < ?goal) .

Body literals: atoms ``[s, p, o]``; ``NOT atom`` and ``NOT EXISTS ?v… IN (atoms)``;
``FILTER(expr)``; ``BIND(expr AS ?v)``; ``AGGREGATE(atoms ON ?g… BIND FUNC(expr) AS ?v …)``;
``RANK(atoms ON ?item BY key… AS ?rank LIMIT ?n)``.
Expressions are SPARQL expressions and are kept as text. ``#@explain`` before a rule gives the
sentence its derivations are explained with (``{var}`` placeholders).
"""

from __future__ import annotations

import re
from pathlib import Path

from engram.projections.rules.program import (
    AGGREGATES,
    RDF_TYPE,
    XSD,
    Aggregate,
    AggregateOutput,
    Atom,
    Bind,
    BodyLiteral,
    Filter,
    Negation,
    Program,
    Rank,
    Rule,
    RuleSyntaxError,
    Term,
    Var,
    _names,
    check_safe,
    expr_vars,
)
from pyoxigraph import Literal, NamedNode


class _Parser:
    WS = re.compile(r"(?:\s+|#(?!@)[^\n]*)+")
    IRI = re.compile(r"<([^<>\"{}|^`\\\s]*)>")
    VAR = re.compile(r"\?([A-Za-z_][A-Za-z0-9_]*)")
    PNAME = re.compile(r"([A-Za-z][\w-]*)?:([A-Za-z0-9_][\w-]*(?:\.[\w-]+)*)?")
    STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
    NUMBER = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
    LANG = re.compile(r"@([A-Za-z]+(?:-[A-Za-z0-9]+)*)")
    WORD = re.compile(r"[A-Za-z_]+")

    def __init__(self, text: str, name: str, program: Program) -> None:
        self.text, self.name, self.program, self.pos = text, name, program, 0
        self.explain: str | None = None

    # -- scanning ---------------------------------------------------------------------
    def error(self, message: str) -> RuleSyntaxError:
        line = self.text.count("\n", 0, self.pos) + 1
        return RuleSyntaxError(f"{self.name}:{line}: {message}")

    def skip(self) -> None:
        while True:
            m = self.WS.match(self.text, self.pos)
            if m and m.end() > self.pos:
                self.pos = m.end()
                continue
            if self.text.startswith("#@explain", self.pos):
                self.pos += len("#@explain")
                self.skip_inline()
                m = self.STRING.match(self.text, self.pos)
                if not m:
                    raise self.error('#@explain needs a "quoted sentence"')
                self.explain = _unescape(m.group(1))
                self.pos = m.end()
                continue
            return

    def skip_inline(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def peek_word(self, word: str) -> bool:
        self.skip()
        m = self.WORD.match(self.text, self.pos)
        return bool(m and m.group(0).upper() == word and m.group(0).isupper())

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise self.error(f"expected {token!r}")
        self.pos += len(token)

    def expect_word(self, word: str) -> None:
        if not self.peek_word(word):
            raise self.error(f"expected {word}")
        self.pos += len(word)

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    # -- grammar ----------------------------------------------------------------------
    def parse(self) -> None:
        while not self.at_end():
            if self.peek_word("PREFIX") or self.peek("@prefix"):
                self.prefix()
            else:
                self.program.rules.append(self.rule())

    def prefix(self) -> None:
        sparql_style = self.peek_word("PREFIX")
        self.pos += len("PREFIX") if sparql_style else len("@prefix")
        self.skip()
        name = re.compile(r"([A-Za-z][\w-]*)?:").match(self.text, self.pos)
        if not name:
            raise self.error("expected a prefix name such as ':' or 'ex:'")
        self.pos = name.end()
        self.skip()
        iri = self.IRI.match(self.text, self.pos)
        if not iri:
            raise self.error("expected <iri> after the prefix name")
        self.pos = iri.end()
        self.program.prefixes[name.group(1) or ""] = iri.group(1)
        if not sparql_style:
            self.expect(".")

    def rule(self) -> Rule:
        self.skip()
        start, explain = self.pos, self.explain
        self.explain = None
        heads = [self.atom()]
        while self.peek(","):
            self.pos += 1
            heads.append(self.atom())
        self.expect(":-")
        body = [self.literal()]
        while self.peek(","):
            self.pos += 1
            body.append(self.literal())
        self.expect(".")
        line = self.text.count("\n", 0, start) + 1
        rule = Rule(
            tuple(heads),
            tuple(body),
            f"{self.name}:{line}",
            " ".join(self.text[start : self.pos].split()),
            explain,
        )
        check_safe(rule)
        return rule

    def literal(self) -> BodyLiteral:
        if self.peek_word("NOT"):
            return self.negation()
        if self.peek_word("FILTER"):
            return self.filter()
        if self.peek_word("BIND"):
            self.expect_word("BIND")
            inner = self.parens()
            parts = re.fullmatch(r"\s*(.*?)\s+AS\s+\?([A-Za-z_][A-Za-z0-9_]*)\s*", inner, re.S)
            if not parts:
                raise self.error("expected BIND(expression AS ?var)")
            expr, var = parts.groups()
            return Bind(expr, var, expr_vars(expr))
        if self.peek_word("AGGREGATE"):
            return self.aggregate()
        if self.peek_word("RANK"):
            return self.rank()
        return self.atom()

    def filter(self) -> Filter:
        self.expect_word("FILTER")
        expr = self.parens()
        return Filter(expr, expr_vars(expr))

    def negation(self) -> Negation:
        self.expect_word("NOT")
        if self.peek_word("EXISTS"):
            self.expect_word("EXISTS")
            local = []
            while self.peek("?"):
                var = self.VAR.match(self.text, self.pos)
                if not var:
                    raise self.error("expected a variable")
                local.append(var.group(1))
                self.pos = var.end()
                if self.peek(","):
                    self.pos += 1
            self.expect_word("IN")
            self.expect("(")
            atoms = [self.atom()]
            while self.peek(","):
                self.pos += 1
                atoms.append(self.atom())
            self.expect(")")
            return Negation(tuple(atoms), frozenset(local))
        return Negation((self.atom(),))

    def atoms_and_filters(self) -> tuple[list[Atom], list[Filter]]:
        """The comma-separated atoms and FILTERs inside AGGREGATE(…) or RANK(…)."""
        atoms: list[Atom] = []
        filters: list[Filter] = []
        while True:
            if self.peek_word("FILTER"):
                filters.append(self.filter())
            else:
                atoms.append(self.atom())
            if not self.peek(","):
                return atoms, filters
            self.pos += 1

    def aggregate(self) -> Aggregate:
        self.expect_word("AGGREGATE")
        self.expect("(")
        atoms, filters = self.atoms_and_filters()
        self.expect_word("ON")
        group = []
        while self.peek("?"):
            var = self.VAR.match(self.text, self.pos)
            assert var
            group.append(var.group(1))
            self.pos = var.end()
        outputs = []
        while self.peek_word("BIND"):
            self.expect_word("BIND")
            self.skip()
            func = re.compile(r"(COUNT|SUM|MIN|MAX)\s*\(").match(self.text, self.pos)
            if not func:
                raise self.error(f"expected one of {', '.join(AGGREGATES)}(…)")
            self.pos = func.end() - 1
            inner = self.parens()
            distinct = inner.strip().upper().startswith("DISTINCT ")
            if distinct:
                inner = inner.strip()[len("DISTINCT ") :]
            self.expect_word("AS")
            self.skip()
            var = self.VAR.match(self.text, self.pos)
            if not var:
                raise self.error("expected ?var after AS")
            self.pos = var.end()
            outputs.append(AggregateOutput(func.group(1), inner.strip(), var.group(1), distinct))
        if not outputs:
            raise self.error("AGGREGATE needs at least one BIND FUNC(…) AS ?var")
        self.expect(")")
        inner_vars = frozenset().union(*(atom.vars for atom in atoms))
        if missing := set(group) - inner_vars:
            raise self.error(f"group variables {_names(missing)} do not occur in the aggregate's atoms")
        return Aggregate(tuple(atoms), tuple(filters), tuple(group), tuple(outputs))

    def rank(self) -> Rank:
        self.expect_word("RANK")
        self.expect("(")
        atoms, filters = self.atoms_and_filters()
        self.expect_word("ON")
        item = self.variable()
        self.expect_word("BY")
        keys = []
        while not self.peek_word("AS"):
            self.skip()
            if self.peek("?"):
                keys.append(f"?{self.variable()}")
            elif word := re.compile(r"[A-Za-z]+(?=\s*\()").match(self.text, self.pos):
                self.pos = word.end()
                keys.append(f"{word.group(0)}({self.parens()})")
            else:
                raise self.error("expected an ORDER BY key (?var, ASC(…), DESC(…) or a function) or AS")
            if self.peek(","):
                self.pos += 1
        if not keys:
            raise self.error("RANK needs at least one key after BY")
        self.expect_word("AS")
        var = self.variable()
        self.expect_word("LIMIT")
        limit = self.variable()
        self.expect(")")
        rank = Rank(tuple(atoms), tuple(filters), item, tuple(keys), var, limit)
        if missing := {item, limit} - rank.vars:
            raise self.error(f"{_names(missing)} must be bound by the RANK's atoms")
        if var in rank.vars:
            raise self.error(f"?{var} is bound by the RANK's atoms: the position needs a variable of its own")
        if item in _joined(rank.atoms, limit):
            raise self.error(f"the LIMIT ?{limit} depends on the item ?{item}: it must be one number for all")
        return rank

    def variable(self) -> str:
        self.skip()
        var = self.VAR.match(self.text, self.pos)
        if not var:
            raise self.error("expected a variable")
        self.pos = var.end()
        return var.group(1)

    def parens(self) -> str:
        """The raw text between balanced parentheses (strings may contain parentheses)."""
        self.expect("(")
        depth, start, at = 1, self.pos, self.pos
        while at < len(self.text):
            char = self.text[at]
            if char == '"':
                quoted = self.STRING.match(self.text, at)
                if not quoted:
                    break
                at = quoted.end()
                continue
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    self.pos = at + 1
                    return self.text[start:at]
            at += 1
        raise self.error("unbalanced parentheses")

    def atom(self) -> Atom:
        self.expect("[")
        s = self.term()
        self.expect(",")
        p = self.term(predicate=True)
        self.expect(",")
        o = self.term()
        self.expect("]")
        if isinstance(s, Literal):
            raise self.error("a literal cannot be a subject")
        if isinstance(p, Literal):
            raise self.error("a literal cannot be a predicate")
        return Atom(s, p, o)

    def term(self, predicate: bool = False) -> Term:
        self.skip()
        text, pos = self.text, self.pos
        if m := self.VAR.match(text, pos):
            self.pos = m.end()
            return Var(m.group(1))
        if m := self.IRI.match(text, pos):
            self.pos = m.end()
            return NamedNode(m.group(1))
        if m := self.STRING.match(text, pos):
            self.pos = m.end()
            value = _unescape(m.group(1))
            if lang := self.LANG.match(text, self.pos):
                self.pos = lang.end()
                return Literal(value, language=lang.group(1))
            if text.startswith("^^", self.pos):
                self.pos += 2
                datatype = self.term()
                if not isinstance(datatype, NamedNode):
                    raise self.error("expected a datatype IRI after ^^")
                return Literal(value, datatype=datatype)
            return Literal(value)
        if m := self.NUMBER.match(text, pos):
            self.pos = m.end()
            lexical = m.group(0)
            if re.fullmatch(r"[+-]?\d+", lexical):
                return Literal(lexical, datatype=NamedNode(XSD + "integer"))
            if "e" in lexical.lower():
                return Literal(lexical, datatype=NamedNode(XSD + "double"))
            return Literal(lexical, datatype=NamedNode(XSD + "decimal"))
        if m := re.compile(r"(true|false)\b").match(text, pos):
            self.pos = m.end()
            return Literal(m.group(1), datatype=NamedNode(XSD + "boolean"))
        if re.compile(r"a\b").match(text, pos):
            self.pos += 1
            return NamedNode(RDF_TYPE)
        if (m := self.PNAME.match(text, pos)) and m.group(0):
            prefix = m.group(1) or ""
            if prefix not in self.program.prefixes:
                raise self.error(f"unknown prefix {prefix!r}:")
            self.pos = m.end()
            return NamedNode(self.program.prefixes[prefix] + (m.group(2) or ""))
        raise self.error("expected a term (?var, <iri>, prefix:name, literal or number)")


def _joined(atoms: tuple[Atom, ...], var: str) -> frozenset[str]:
    """The variables that share an atom with ``var``, directly or through others."""
    joined, grown = {var}, True
    while grown:
        grown = False
        for atom in atoms:
            if atom.vars & joined and not atom.vars <= joined:
                joined |= atom.vars
                grown = True
    return frozenset(joined)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), text)


def parse_rules(text: str, name: str = "<rules>", program: Program | None = None) -> Program:
    program = program or Program()
    _Parser(text, name, program).parse()
    return program


def load_rules(directory: Path) -> Program:
    """Every ``*.dlog`` file of ``directory``, in name order, as one program."""
    program = Program()
    files = sorted(directory.glob("*.dlog"))
    if not files:
        raise RuleSyntaxError(f"no .dlog files in {directory}")
    for path in files:
        parse_rules(path.read_text(), path.name, program)
    return program
