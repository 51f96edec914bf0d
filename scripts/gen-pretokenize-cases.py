#!/usr/bin/env python3
"""Writes tests/data/pretokenize_cases.json: texts and how the published
pre-tokenizer regexes of GPT-2, Llama 3 (cl100k-style, digits 1..3), Qwen2
(digits one by one) and DeepSeek LLM (six regexes in turn) split them, computed with the `regex` module (Debian
python3-regex), an implementation independent of turbokv's hand-written
splitters (src/text/pretokenize.cpp). Texts: the llama.cpp tokenizer suites'
inputs in ../shared/data/tokenizer, WikiText-2 lines, and mixed-script
strings. Run from the repository root: scripts/gen-pretokenize-cases.py"""
import json
import os
import random

import regex

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared")
PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


# DeepSeek LLM: regexes applied one after another, each splitting the pieces
# the previous ones left into matches and gaps (llama.cpp's
# unicode_regex_split); \s is ASCII whitespace there (std::wregex in the
# classic locale), written out here.
_S = r"[ \t\n\v\f\r]"
DEEPSEEK_LLM = [
    r"[\r\n]",
    _S + "?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943]+",
    _S + "?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    _S + "+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    r"\p{N}+",
]


# The regex pre-tokenizers (src/text/pretokenize.cpp runs the same lists with
# its own matcher, src/text/cpt_regex.cpp), as llama.cpp's llama-vocab.cpp
# lists them, written as the models' own patterns where llama.cpp rewrites
# them for std::regex. Kimi K2 as its tiktoken pattern, with class
# intersections (regex.V1), which turbokv writes with lookaheads.
CONTRACT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
CASE_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + CONTRACT + "?|"
              r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + CONTRACT + "?")
GPT2_LLAMACPP = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
QWEN2 = CONTRACT + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
CJK_DS = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
CJK_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
ASCII_PUNCT_WORD = r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"""
BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
NOT_HAN_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
NOT_HAN_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
REGEX_KINDS = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_LLAMACPP, r"\p{N}+", "[0-9][0-9][0-9]"],
    "deepseek_coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_DS, r"\p{N}"],
    "deepseek_v3": [r"\p{N}{1,3}", CJK_KANA,
                    ASCII_PUNCT_WORD + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "spark2_5": [r"\p{N}{1,3}", CJK_KANA,
                 ASCII_PUNCT_WORD + r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"],
    "youtu": ["[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+"
              "|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
              CASE_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt4o": [CASE_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "tekken": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
               r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
               r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen35": [CONTRACT + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "kimi_k2": [r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?" + NOT_HAN_UPPER + "*" + NOT_HAN_LOWER + "+" + CONTRACT + "?|"
                r"[^\r\n\p{L}\p{N}]?" + NOT_HAN_UPPER + "+" + NOT_HAN_LOWER + "*" + CONTRACT + "?|"
                r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "seed_coder": [CONTRACT + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "exaone_moe": [CONTRACT + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"],
    "minicpm5": [r"\p{N}{1,3}", CONTRACT + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "laguna": [r"[^\n]+|[\n]+", QWEN2],
    "jais2": [CONTRACT + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              + "|".join(r"\s{%d}(?!\S)" % n for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}"],
    "bloom": [BLOOM],
    "viking": [BLOOM, r"\p{N}"],
    "chameleon": ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2_LLAMACPP],
    "tiny_aya": [r"\d{1,3}(?=(?:\d{3})*\b)", CASE_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}


def split_staged(exprs, text):
    pieces = [text]
    for e in exprs:
        r = regex.compile(e, regex.V1 if "&&" in e else 0)
        nxt = []
        for p in pieces:
            prev = 0
            for m in r.finditer(p):
                if m.start() > prev:
                    nxt.append(p[prev:m.start()])
                nxt.append(m.group())
                prev = m.end()
            if prev < len(p):
                nxt.append(p[prev:])
        pieces = nxt
    return pieces


def texts():
    out = []
    tok = os.path.join(SHARED, "data", "tokenizer")
    for name in sorted(os.listdir(tok)):
        if name.endswith(".inp"):
            with open(os.path.join(tok, name), encoding="utf-8") as f:
                out += [c.strip("\n") for c in f.read().split("__ggml_vocab_test__") if c.strip("\n")]
    with open(os.path.join(SHARED, "data", "text", "wikitext-2-raw-test.txt"), encoding="utf-8") as f:
        lines = [l for l in f.read().replace("\r\n", "\n").split("\n") if l.strip()]
    out += lines[:150:3]
    out += [" " * 600 + "x", "a" + " " * 130 + "b", "\n" * 5 + "  x"]  # jais-2's \s{512}..\s{4} runs
    rng = random.Random(20261201)
    pieces = ["Hello", " world", "'s", "'LL", "'Re", " 2024", "12345678", "\n", "\r\n", "\t", "  ", "   ",
              "ß", "Ünïcödé", "Ωμέγα", "ῼ", "K", "\u3000", "。", "！？", "ｈｉ", "𐐀𐐁", "ࠀ", "日本語", "中文字符", "한국어", "🦙", "😀👍", "$", "!!", "...", "--", "«", "»",
              "x²", "٣٤٥", "Ⅻ", "ǅ", "\u00a0", "\u2009", "é", "e\u0301", "ﬁ", "ＡＢＣ", "١٢", "\u200b", "?!",
              # the newer pre-tokenizers' rules: case runs, kana, Han next to Latin, grouped digits,
              # whitespace runs, their punctuation classes and literal markers
              "HTTPServer", "McDonald'S", "ÉCOLE", "Straße", "ΑΘΗΝΑ", "ſ", "'ſ", "ひらがな", "カタカナ", "漢字abc",
              "1,234,567", "1234567", "    ", "\t\t", "        ", "। ", "،", "۔", "…", "“quoted”", "—",
              "<sentinel:12>", "IMGIMGABCZ", "/path/to", "x/y\n", "Hello, world!", "ㄅㄆ", "︰", "ＡＢＣ!"]
    for _ in range(300):
        out.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))))
    seen, uniq = set(), []
    for t in out:
        if t not in seen:
            seen.add(t)
            uniq.append(t)
    return uniq


def main():
    cases = []
    for t in texts():
        cases.append({"text": t, **{k: regex.findall(p, t) for k, p in PATTERNS.items()},
                      "deepseek_llm": split_staged(DEEPSEEK_LLM, t),
                      **{k: split_staged(exprs, t) for k, exprs in REGEX_KINDS.items()}})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "pretokenize_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"regex_version": regex.__version__, "patterns": PATTERNS, "deepseek_llm": DEEPSEEK_LLM,
                   "regex_kinds": REGEX_KINDS,
                   "cases": cases}, f, ensure_ascii=False)
        f.write("\n")
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
