"""Redaction: the one function every writer passes what it writes through (docs/security.md).

A secret is found three ways, in any structure (dicts, lists, strings at any depth):

- by the name it is stored under: a dict key, an environment variable, an override's dotted key,
  a `KEY=VALUE` / `key: value` / `"key": "value"` / `--key value` inside a string or argv. Names
  are read as words (`wandb_api_key` -> wandb, api, key; `apiKey` -> api, key), never as
  substrings, so `tokenizer`, `max_tokens`, `kv_tokens`, `key_value_heads` and
  `kv_bytes_per_token` are ordinary;
- by the shape of the value, wherever it stands: Hugging Face `hf_...`, OpenAI/Anthropic `sk-...`,
  GitHub `ghp_/gho_/ghu_/ghs_/ghr_...` and `github_pat_...`, GitLab `glpat-...`, Slack `xox?-...`,
  AWS `AKIA/ASIA...`, JWTs, PEM private keys, `Bearer`/`Basic` credentials, `user:password@` in
  URLs, and a 40-hex W&B key after a wandb name (`WANDB_API_KEY=`, `wandb login`);
- the value is replaced by REDACTED; the name, the quotes and everything around it are kept, so
  a run's configuration stays readable and reproducible from its directory.

Names come in two strengths. A name whose last word is secret, password, credential or apikey,
or key/token qualified by a word that makes it one (api_key, access_key, hf_token,
wandb_api_key, ...), hides every value but a boolean, nothing, or a reference to an environment
variable (`$HF_TOKEN`, `${oc.env:HF_TOKEN}`: the form the suite recommends). Any other `*_key` or
`*_token` (`prompt_key`, `input_key`, `pad_token`) names a data field or a special token far more
often than a secret: its value is kept when it plainly is one (a field name without digits, a
bracketed token like `<|endoftext|>`, a number), and hidden otherwise.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
SHELL_REDACTED = "REDACTED"  # in a shell script: a plain word, so the script still parses (bash -n)

# Last words that make any name a secret's; words that make a trailing key/token one.
SECRET_WORDS = frozenset(
    {"secret", "password", "passwd", "passphrase", "credential", "credentials", "apikey"}
)
KEY_WORDS = frozenset({"key", "token"})
PLURAL_KEY_WORDS = frozenset({"keys", "tokens"})  # secret only when qualified: api_keys, not max_tokens
SECRET_QUALIFIERS = frozenset(
    {
        "api", "access", "secret", "private", "auth", "bearer", "refresh", "session", "client", "signing",
        "encryption", "ssh", "oauth", "personal", "service", "master", "license", "deploy", "webhook",
        "hf", "huggingface", "hub", "github", "gh", "gitlab", "wandb", "openai", "anthropic", "slack",
        "bot", "aws", "azure", "gcp", "prime", "pypi", "npm", "docker", "registry", "comet", "neptune",
    }
)  # fmt: skip

_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# $HF_TOKEN, ${HF_TOKEN}, ${HF_TOKEN:?unset}, ${oc.env:HF_TOKEN}: a reference, not a value
_ENV_REF = re.compile(r"^\$(?:[A-Za-z_]\w*|\{[A-Za-z_][\w.]*(?::[^}]*)?\})$")
_FIELD = re.compile(r"^[A-Za-z][A-Za-z_.\-/]{0,63}$")  # prompt, extra_info.answer: a column, not a key
# nothing, or a flag: never a secret's value
NO_VALUE = frozenset(
    {"", "~", REDACTED, SHELL_REDACTED, *"None none null Null NULL False True false true".split()}
)
_NUMBER = re.compile(r"^[+-]?(\d[\d_,]*\.?\d*|\.\d+)([eE][+-]?\d+)?%?$")
_BRACKETED = re.compile(r"^(<.*>|\[.*\])$")  # <|endoftext|>, </s>, [PAD], <redacted>

# Values recognised by shape alone, wherever they stand (not preceded by a letter or digit).
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"hf_(?=[A-Za-z0-9]*[A-Z0-9])[A-Za-z0-9]{10,}"  # Hugging Face (hf_ + 34 mixed-case)
    r"|sk-[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic (sk-ant-...), sk-proj-...
    r"|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{16,}"  # GitLab
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT
    r"|local-[0-9a-f]{40}"  # W&B server key
    r")"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
_WANDB_HEX = re.compile(
    r"(?i)wandb[\w\-]*(?:\s+login(?:\s+--?[\w\-]+)*)?[\s=:\"']+([0-9a-f]{40})(?![0-9a-f])"
)
_AUTH = re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/\-]{8,}=*)")
_URL_PASSWORD = re.compile(r"://[^/\s:@]+:([^/\s@]+)@")
_VALUE = r"(?P<val>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`,;=(){}\[\]]+)"
# name=value, name: value, "name": "value", --name=value; and --name value (argv as text); not a
# shell expansion (${HF_TOKEN:-}), which names a variable and holds no value
_ASSIGN = re.compile(
    r"(?<![\w.\-])(?<!\$\{)-{0,2}(?P<name>[A-Za-z_][\w.\-]*)[\"']?[ \t]*(?:=|:(?![/:]))[ \t]*" + _VALUE
)
_FLAG = re.compile(r"(?<![\w.\-])--(?P<name>[A-Za-z][\w.\-]*)[ \t]+(?!-)" + _VALUE)
_FLAG_ITEM = re.compile(r"^--?(?P<name>[A-Za-z][\w.\-]*)$")  # an argv item naming the next one


def name_words(name: str) -> list[str]:
    """A name's words, lowercased: the last dotted part of `+framework.native.wandbApiKey` ->
    ['wandb', 'api', 'key']."""
    last = re.split(r"[./]", str(name).strip().lstrip("+~-"))[-1]
    return [w.lower() for w in _WORD.findall(last)]


def name_strength(name: str) -> str:
    """'secret' (a secret's name: api_key, HF_TOKEN, password), 'maybe' (another *_key or *_token:
    prompt_key, pad_token) or '' (an ordinary name: max_tokens, tokenizer, kv_bytes_per_token)."""
    words = name_words(name)
    if not words:
        return ""
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if last in SECRET_WORDS or (last in PLURAL_KEY_WORDS and before in SECRET_QUALIFIERS):
        return "secret"
    if last not in KEY_WORDS or before == "per":  # kv_bytes_per_token is a size, not a credential
        return ""
    return "secret" if before in SECRET_QUALIFIERS else "maybe"


def secret_value(name: str, value: Any) -> bool:
    """Whether `value`, stored under `name`, is a secret to hide (module docstring: the rules)."""
    strength = name_strength(name)
    if not strength or value is None or isinstance(value, bool) or isinstance(value, dict | list):
        return False
    text = str(value).strip().strip("\"'")
    if text in NO_VALUE or _ENV_REF.match(text) or not any(c.isalnum() for c in text):
        return False
    if strength == "maybe":  # a field name, a special token or a count (`#new-token: 577`) is no credential
        return not (_NUMBER.match(text) or _FIELD.match(text) or _BRACKETED.match(text))
    return True


def _spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every secret inside free text, merged and in order."""
    spans = [m.span() for m in _SHAPES.finditer(text)]
    spans += [m.span(1) for rx in (_WANDB_HEX, _AUTH, _URL_PASSWORD) for m in rx.finditer(text)]
    for rx in (_ASSIGN, _FLAG):
        for m in rx.finditer(text):
            if secret_value(m["name"], m["val"]):
                start, end = m.span("val")
                quoted = m["val"][0] in "\"'" and len(m["val"]) > 1
                spans.append((start + 1, end - 1) if quoted else (start, end))
    merged: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        elif e > s:
            merged.append((s, e))
    return merged


def redact_text(text: str, marker: str = REDACTED) -> str:
    """`text` with every secret in it (by name or by shape) replaced by `marker` (SHELL_REDACTED
    for a shell script)."""
    return _replace(text, _spans(text), marker)


def _replace(text: str, spans: list[tuple[int, int]], marker: str = REDACTED) -> str:
    out, at = [], 0
    for s, e in spans:
        out += [text[at:s], marker]
        at = e
    return "".join(out) + text[at:] if out else text


def _walk(node: Any, path: str, found: dict[str, list[str]] | None) -> Any:
    """redact()'s walk; with `found`, also records each secret under its dotted path."""

    def hide(where: str, secret: Any) -> str:
        if found is not None:
            found.setdefault(where, []).append(str(secret))
        return REDACTED

    def text(where: str, s: str) -> str:
        spans = _spans(s)
        if found is not None:
            found.setdefault(where, []).extend(s[a:b] for a, b in spans)
        return _replace(s, spans)

    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            where = f"{path}.{k}" if path else str(k)
            if isinstance(v, list) and name_strength(str(k)) == "secret":  # api_keys: [..]: each one
                out[k] = [
                    hide(f"{where}[{i}]", x) if secret_value(str(k), x) else _walk(x, f"{where}[{i}]", found)
                    for i, x in enumerate(v)
                ]
            elif secret_value(str(k), v):
                out[k] = hide(where, v)
            else:
                out[k] = _walk(v, where, found)
        return out
    if isinstance(node, list | tuple):
        items = list(node)
        out_list = []
        for i, v in enumerate(items):
            flag = _FLAG_ITEM.match(items[i - 1]) if i and isinstance(items[i - 1], str) else None
            if flag and isinstance(v, str) and secret_value(flag["name"], v):  # argv: --api-key VALUE
                out_list.append(hide(f"{path}[{i}]", v))
            else:
                out_list.append(_walk(v, f"{path}[{i}]", found))
        return out_list
    if isinstance(node, str):
        return text(path, node)
    return node


def redact(node: Any) -> Any:
    """A copy of `node` (dict, list, string or scalar, at any depth) with every secret replaced by
    REDACTED: dict values by their key's name, argv values by the flag before them, strings by the
    names and shapes inside them. Ordinary values are returned unchanged."""
    return _walk(node, "", None)


def secret_paths(node: Any) -> dict[str, list[str]]:
    """Dotted path (`cluster.setup[0]`, `framework.native.wandb_api_key`) -> the secret values
    redact() would hide there; {} when `node` holds none."""
    found: dict[str, list[str]] = {}
    _walk(node, "", found)
    return {k: v for k, v in found.items() if v}


def carried_secrets(config: Any, launch_texts: list[str]) -> list[str]:
    """The config keys whose secret values a rendered launch (its argv, env, files, sbatch text)
    carries: those the launch cannot use once it is written redacted."""
    blob = "\n".join(launch_texts)
    return [path for path, values in secret_paths(config).items() if any(v and v in blob for v in values)]


def carried_secrets_note(keys: list[str]) -> str:
    """The one line said when a launch carries a secret typed into the config (runners/base.py at
    render time; bench run refuses to submit such a launch)."""
    return (
        f"{', '.join(keys)}: a secret typed into the config reaches the launch, which is written "
        "redacted and so cannot use it; keep the secret out of the config: export it "
        "in the shell you submit from (sbatch passes that environment to the job) and refer to it by "
        "name, e.g. $HF_TOKEN or $WANDB_API_KEY"
    )


def redact_file(name: str, text: str) -> str:
    """A file's text, redacted for its kind: shell scripts (*.sbatch, *.sh) get SHELL_REDACTED."""
    return redact_text(text, SHELL_REDACTED if name.endswith((".sbatch", ".sh")) else REDACTED)
