"""One declaration per configuration key, and everything derived from it.

A configuration is a frozen dataclass whose fields are declared with `setting(...)`: the default,
the validator (`check(source, key, value) -> value`, raising the caller's one-line error), the
help text, and optionally the command-line flag that overrides it. From that one declaration:

- `parse_section(cls, raw, source)` validates a mapping (as read from YAML) into `cls`: an
  unknown key is an error naming it and the known keys; nested sections are `setting`s whose
  check calls `parse_section` on their own dataclass;
- `add_flags(parser, cls)` registers each flag on Locust's argument parser, with its environment
  variable (`LOCUST_<FLAG>`) and its web UI form field (Locust shows every custom option unless
  `web_ui=False`; `secret=True` masks it);
- `flag_overrides(options, cls)` reads the flags back (the web UI's form sends text: every flag
  takes text, parsed by the setting's `parse`);
- `reference_rows(cls)` gives the rows of the configuration reference in the docs.

So adding a key is one `setting(...)` line plus its test; its flag, environment variable, form
field and docs row follow.
"""

from __future__ import annotations

import argparse
import dataclasses
import reprlib
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, dataclass, field
from typing import Any

Check = Callable[[str, str, Any], Any]  # (source, key, value) -> the validated value
METADATA_KEY = "llmload"
SHOWN_CHARS = 100  # of a bad value in an error message: enough to recognise it, never a page


def _bounded_repr() -> reprlib.Repr:
    """A repr that looks at a bounded part of a value: a few items of each list or mapping, a few
    levels deep, the first characters of a string, so its cost never grows with the value (a
    YAML alias expands to billions of shared references)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 8, 8, 8, 8
    r.maxstring = r.maxlong = r.maxother = SHOWN_CHARS
    return r


_REPR = _bounded_repr()


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)` for an error message, cut to about `limit` characters (`...` marks a cut)."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int beyond Python's str-conversion limit
        text = f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else "<unprintable>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class Setting:
    """What `setting()` records about one configuration key."""

    help: str
    check: Check | None = None  # None: a command-line-only setting (argparse's `parse` converts it)
    flag: str | None = None  # command-line override, e.g. "--max-tokens"; None: the file only
    parse: Callable[[str], Any] | None = None  # flag text -> raw value (default: the text itself)
    web_ui: bool = True  # a field on Locust's start form
    secret: bool = False  # masked on the form, never echoed
    choices: tuple[str, ...] | None = None  # the flag's choices (shown by --help and the form)
    shown_default: str | None = None  # how the docs show the default (default: repr of the value)
    group: str = ""  # the --help section it is listed under (plain argparse commands)

    @property
    def env_var(self) -> str | None:
        return None if self.flag is None else "LOCUST_" + self.flag.lstrip("-").replace("-", "_").upper()


def setting(
    default: Any = MISSING,
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    help: str,  # noqa: A002  (the argparse word)
    check: Check | None = None,
    flag: str | None = None,
    parse: Callable[[str], Any] | None = None,
    web_ui: bool = True,
    secret: bool = False,
    choices: tuple[str, ...] | None = None,
    shown_default: str | None = None,
    group: str = "",
) -> Any:
    """A dataclass field declaring one configuration key (see the module docstring)."""
    meta = {METADATA_KEY: Setting(help, check, flag, parse, web_ui, secret, choices, shown_default, group)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def settings(cls: type) -> Iterator[tuple[Field[Any], Setting]]:
    """The declared keys of a configuration dataclass, in declaration order."""
    for f in dataclasses.fields(cls):
        declared = f.metadata.get(METADATA_KEY)
        if declared is not None:
            yield f, declared


def key_check(cls: type, key: str) -> Check:
    """The check of `cls`'s key `key` (for a flag outside Locust that takes the same values)."""
    for f, s in settings(cls):
        if f.name == key and s.check is not None:
            return s.check
    raise KeyError(f"{cls.__name__} declares no checked key {key!r}")


def parse_section(
    cls: type, raw: dict[str, Any], source: str, prefix: str = "", error: type[Exception] = ValueError
) -> dict[str, Any]:
    """The validated field values of `raw` for `cls` (keys it does not set are left out).

    Keys are reported as `prefix + key` (e.g. "retries.max"); `error` is the exception raised
    for an unknown key (the checks raise their own)."""
    known = {f.name: s for f, s in settings(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise error(f"{source}: unknown key {shown(f'{prefix}{key}')} (known: {', '.join(known)})")
        check = known[key].check
        values[key] = value if check is None else check(source, prefix + str(key), value)
    return values


class NonEmpty(argparse.Action):
    """Stores the flag's text, refusing blank text: on the command line (or in its environment
    variable) an empty value would silently mean "not given" (the web UI's empty field still does)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if isinstance(values, str) and not values.strip():
            parser.error(
                f"argument {option_string or self.dest}: empty value; leave the flag out to keep the "
                "ladder file's value"
            )
        setattr(namespace, self.dest, values)


def add_flags(parser: Any, cls: type) -> None:
    """Register the flag of every key of `cls` that has one on Locust's parser (which takes
    `env_var`, `include_in_web_ui` and `is_secret`)."""
    for f, s in settings(cls):
        if s.flag is None:
            continue
        kwargs: dict[str, Any] = {
            "default": "",
            "action": NonEmpty,
            "env_var": s.env_var,
            "include_in_web_ui": s.web_ui,
            "help": f"{s.help} (overrides the ladder file's '{f.name}')",
        }
        if s.secret:
            kwargs["is_secret"] = True
        if s.choices is not None:
            kwargs["choices"] = ["", *s.choices]
        parser.add_argument(s.flag, **kwargs)


def add_plain_flags(parser: Any, cls: type, groups: dict[str, Any] | None = None) -> None:
    """Plain argparse flags for every key of `cls`, nested sections flattened: `--<key>` unless the
    key names its own flag; a boolean key is a switch; `parse` converts the text; each goes into
    `groups[setting.group]` when given (for commands that are not Locust, e.g. the simulator)."""
    for f, s in settings(cls):
        nested = _section_class(f)
        if nested is not None:
            add_plain_flags(parser, nested, groups)
            continue
        target = (groups or {}).get(s.group, parser)
        flag = s.flag or "--" + f.name.replace("_", "-")
        default = _default(f)
        if isinstance(default, bool):
            target.add_argument(flag, action="store_true", help=s.help)
            continue
        kwargs: dict[str, Any] = {"default": default, "help": s.help}
        if s.parse is not None:
            kwargs["type"] = s.parse
        if s.choices is not None:
            kwargs["choices"] = s.choices
        target.add_argument(flag, **kwargs)


def from_plain_flags(args: Any, cls: type, **fixed: Any) -> Any:
    """An instance of `cls` from the namespace `add_plain_flags` filled (nested sections built the
    same way); `fixed` gives the fields that are not flags."""
    values: dict[str, Any] = {}
    for f, s in settings(cls):
        nested = _section_class(f)
        if nested is not None:
            values[f.name] = from_plain_flags(args, nested)
        else:
            values[f.name] = getattr(args, flag_dest(s.flag or f.name))
    return cls(**values, **fixed)


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def flag_dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


PARSED_AS = {int: "an integer", float: "a number"}  # what a flag's parse expects, for its error


def flag_overrides(
    options: Any, cls: type, error: type[Exception] = ValueError
) -> dict[str, tuple[Any, str]]:
    """{key: (raw value, flag)} for every flag of `cls` given a value (text, or a typed value
    from a caller that built the namespace itself); a flag left empty is not an override. Text
    the flag's `parse` rejects raises `error` "<flag>: expected <what>, got <text>"."""
    out: dict[str, tuple[Any, str]] = {}
    for f, s in settings(cls):
        if s.flag is None:
            continue
        value = getattr(options, flag_dest(s.flag), None)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if isinstance(value, str) and s.parse is not None:
            try:
                value = s.parse(value.strip())
            except ValueError as exc:
                if type(exc) is not ValueError:  # the parse's own one-line error (a ConfigError)
                    raise
                what = PARSED_AS.get(s.parse, "a valid value")  # type: ignore[call-overload]
                raise error(f"{s.flag}: expected {what}, got {shown(value)}") from None
        out[f.name] = (value, s.flag)
    return out


def default_text(f: Field[Any], s: Setting) -> str:
    """The default as the docs show it."""
    if s.shown_default is not None:
        return s.shown_default
    value = _default(f)
    if dataclasses.is_dataclass(value):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def reference_rows(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, default, meaning, flag / env var) for every key of `cls`, nested sections' keys as
    `section.key` right after their section."""
    rows = []
    for f, s in settings(cls):
        override = f"`{s.flag}`, `{s.env_var}`" if s.flag else ""
        rows.append((f"`{prefix}{f.name}`", default_text(f, s), s.help, override))
        nested = _section_class(f)
        if nested is not None:
            rows += reference_rows(nested, prefix=f"{prefix}{f.name}.")
    return rows


def _section_class(f: Field[Any]) -> type | None:
    """The dataclass of a nested section (its default factory's class), else None."""
    factory = f.default_factory
    if factory is not MISSING and isinstance(factory, type) and dataclasses.is_dataclass(factory):
        return factory
    section = f.metadata.get(METADATA_KEY)
    return getattr(section.check, "section", None) if section is not None else None


def reference_markdown(cls: type) -> str:
    """The configuration reference table (markdown) of `cls`."""
    lines = ["| key | default | meaning | command line / environment |", "|---|---|---|---|"]
    for key, default, meaning, override in reference_rows(cls):
        lines.append(f"| {key} | {default} | {meaning} | {override} |")
    return "\n".join(lines) + "\n"
