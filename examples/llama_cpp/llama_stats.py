"""Reads the logs of llama.cpp's llama-speculative and llama-lookup and prints
them as rows of the specdec comparison table.

Target calls are not printed by these programs; each of their rounds makes one
target llama_decode and emits the accepted drafts plus one token, so
target calls = n_predict - n_accept. "text == plain greedy" (temperature 0)
checks that specdec's plain greedy text occurs in the program's output (the
programs may generate a few tokens more than asked)."""
import re
import sys


def stats(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    def num(pattern):
        m = re.search(pattern, text)
        return float(m.group(1)) if m else None
    return text, {
        "n_predict": num(r"n_predict\s*=\s*(\d+)"),
        "n_accept": num(r"n_accept\s*=\s*(\d+)"),
        "n_drafted": num(r"n_drafted\s*=\s*(\d+)"),
        "speed": num(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s"),
    }


def main():
    plain_path, temp, *logs = sys.argv[1:]
    plain = open(plain_path, encoding="utf-8", errors="replace").read()
    for path in logs:
        name = "llama.cpp " + path.rsplit("/", 1)[-1].removesuffix(".txt")
        try:
            text, s = stats(path)
        except OSError:
            print(f"| {name} | (no log) |")
            continue
        if s["n_predict"] is None or s["n_accept"] is None:
            print(f"| {name} | (failed, see {path}) |")
            continue
        calls = s["n_predict"] - s["n_accept"]
        same = "n/a (T>0)" if float(temp) != 0.0 else ("yes" if plain and plain in text else "NO")
        print(f"| {name} | {int(s['n_predict'])} | {s['speed'] or 0:.1f} | {int(calls)} | "
              f"{s['n_predict'] / calls:.2f} | {s['n_accept'] / calls:.2f} | {calls / s['n_predict']:.3f} | "
              f"{(s['n_drafted'] or 0) / calls + 1:.2f} | - | {same} |")


if __name__ == "__main__":
    main()
