#!/usr/bin/env python3
"""Writes tests/data/o200k-gpt-oss/llama-tokenize.json: llama.cpp's token ids
(llama-tokenize, ../shared/tools/llama.cpp) for test strings on a gpt-oss-style
vocabulary (gen-model --arch gpt-oss --harmony-vocab: GPT-2's byte-level BPE,
pre-tokenizer gpt-4o = o200k, harmony's special tokens).

  scripts/o200k-fixture.py build/turbokv

The strings: llama.cpp's own tokenizer test strings
(../shared/data/tokenizer/ggml-vocab-gpt-2.gguf.inp) and EXTRA below, aimed at
where o200k's pre-tokenizer splits differently from GPT-2's."""
import json, os, subprocess, sys, tempfile

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.environ.get("TKV_SHARED", os.path.join(here, "..", "shared"))
vocab = os.path.join(shared, "data/tokenizer/ggml-vocab-gpt-2.gguf")
GEN = ["gen-model", "--arch", "gpt-oss", "--harmony-vocab", "--vocab-from", vocab, "--layers", "1", "--dim", "64",
       "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--ffn", "64", "--experts", "2", "--experts-used", "1",
       "--type", "F16", "--seed", "1"]
EXTRA = [
    "I'M HERE, YOU'RE THERE. We'll see; they'd've gone.",
    "don't DON'T Don'T can't",
    "1234567 12 3 1.5 2024-06-01 99999",
    "HelloWorld XMLHttpRequest camelCaseWords ABCdef",
    "日本語のテキスト、中文文本。한국어",
    "Здравствуй МИР ΕΛΛΗΝΙΚΆ",
    "a\n\n\tb  \n c\r\n\r\nd",
    "foo/bar\n\n/baz//\n",
    "naïve café Ünïcödé",
    "emoji 🦙🦙 a 👍🏽!",
    "    leading spaces and trailing   ",
    "<|start|>user<|message|>Hi there<|end|><|start|>assistant",
    "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
    "x<|constrain|>json{\"a\": 1}<|call|>",
    "$$$ ((( ))) ... !!! ??? ---",
    "tab\tseparated\tvalues\t1\t22\t333",
]


def main():
    turbokv = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "build/turbokv")
    inp = open(vocab + ".inp", encoding="utf-8", newline="").read()
    texts = inp.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    texts += EXTRA
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt-oss-vocab.gguf")
        subprocess.run([turbokv] + GEN + ["-o", model], check=True)
        cases = []
        for i, t in enumerate(texts):
            f = os.path.join(tmp, "in%d.txt" % i)
            with open(f, "w", encoding="utf-8", newline="") as fh:
                fh.write(t)
            out = subprocess.run([os.path.join(here, "scripts/llama-cpp.sh"), "llama-tokenize", "-m", model, "-f", f,
                                  "--ids", "--log-disable", "--no-bos"], check=True, capture_output=True, text=True)
            line = [l for l in out.stdout.splitlines() if l.startswith("[")][-1]
            cases.append({"text": t, "ids": json.loads(line)})
    doc = {"gen_model": " ".join(["turbokv"] + GEN).replace(vocab, "../shared/data/tokenizer/ggml-vocab-gpt-2.gguf"),
           "llama_tokenize": "llama-tokenize -m FILE -f TEXT --ids --log-disable --no-bos (llama.cpp build 9079)",
           "cases": cases}
    dst = os.path.join(here, "tests/data/o200k-gpt-oss/llama-tokenize.json")
    with open(dst, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    print("wrote %s (%d strings)" % (dst, len(cases)))


if __name__ == "__main__":
    main()
