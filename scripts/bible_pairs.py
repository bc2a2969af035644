#!/usr/bin/env python3
"""English-Spanish verse pairs from two Bibles, aligned by verse reference.

Reads the World English Bible (SWORD module engWEB2015eb, Debian
sword-text-web) and the Reina-Valera 1909 (spaRV1909eb, Debian
sword-text-sparv) through Debian's diatheke, one verse per reference, and
writes `source<TAB>target` TSV files: the training pairs, and two whole
books held out (validation and test) so no verse of theirs is trained on.

    scripts/bible_pairs.py --out-dir data/ [--val-book Jonah] [--test-book Ruth]

writes data/bible_train.tsv, data/bible_val.tsv, data/bible_test.tsv and
prints the counts. Standard library only; diatheke must be on PATH.
"""
import argparse
import os
import re
import subprocess
import sys

# The 66 books as diatheke names them; a line opening with one of these and
# "C:V: " starts a verse, any other line continues the one before (poetry
# runs over several lines, some after a blank line).
BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
         "I Samuel", "II Samuel", "I Kings", "II Kings", "I Chronicles", "II Chronicles", "Ezra",
         "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
         "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
         "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
         "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "I Corinthians",
         "II Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians",
         "I Thessalonians", "II Thessalonians", "I Timothy", "II Timothy", "Titus", "Philemon",
         "Hebrews", "James", "I Peter", "II Peter", "I John", "II John", "III John", "Jude",
         "Revelation of John"]
VERSE = re.compile(r"^\s*(" + "|".join(sorted(map(re.escape, BOOKS), key=len, reverse=True)) +
                   r") (\d+):(\d+):\s?(.*)$")
# Footnotes are asked for (-o f) and cut here: left out by diatheke, they
# take the space between two words with them ("Yahweh's[note] word").
NOTE = re.compile(r"\[\d+:\d+[^\]]*\]")
# OSIS titles and tags leaking into plain text, and Strong's numbers (<G5547>)
MARKUP = re.compile(r"<title[^>]*>.*?</title>|<[^>]*>")
# Verses whose two sides differ more than this in length are misalignments
# or carry appended matter (the WEB's glossary follows Revelation 22:21).
MAX_RATIO = 3.0


def clean(text):
    return " ".join(MARKUP.sub(" ", NOTE.sub(" ", text)).split())


def diatheke(module, key):
    try:
        return subprocess.run(["diatheke", "-b", module, "-f", "plain", "-o", "f", "-k", key],
                              check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("bible_pairs: diatheke is not installed; run `make deps` (Debian diatheke)")
    except subprocess.CalledProcessError as err:
        sys.exit(f"bible_pairs: diatheke -b {module} failed ({err.returncode}); run `make deps` "
                 f"(Debian sword-text-web, sword-text-sparv)")


def titles(lines):
    """Psalm titles: diatheke prints a psalm's title again before each of its
    verses, after a blank line. A line found there twice in one chapter is a
    title (a poem's refrain never follows a blank line)."""
    seen, found = {}, set()
    for i, line in enumerate(lines):
        m = VERSE.match(line)
        if m and i >= 2 and not lines[i - 2].strip() and lines[i - 1].strip():
            k = (m.group(1), m.group(2), clean(lines[i - 1]))
            seen[k] = seen.get(k, 0) + 1
            if seen[k] == 2: found.add(k)
    return found


def book_verses(module, book, got):
    """Adds {(book, chapter, verse): text} of one book to got. One call a
    book: over a longer range diatheke repeats the last psalm title after
    every later verse."""
    lines = diatheke(module, book).splitlines()
    drop = titles(lines)
    key, parts = None, []
    for i, line in enumerate(lines):
        m = VERSE.match(line)
        nxt = VERSE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if m:
            if key: got[key] = clean(" ".join(parts))
            key, parts = (m.group(1), int(m.group(2)), int(m.group(3))), [m.group(4)]
        elif nxt and (nxt.group(1), nxt.group(2), clean(line)) in drop:
            continue
        elif key and line.strip() != f"({module})":
            parts.append(line)
    if key: got[key] = clean(" ".join(parts))


def verses(module):
    """{(book, chapter, verse): text} of one SWORD module through diatheke."""
    got = {}
    for book in BOOKS:
        book_verses(module, book, got)
    if len(got) < 30000:
        sys.exit(f"bible_pairs: {module} gave only {len(got)} verses; is the module complete? "
                 f"(diatheke -b system -k modulelist)")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--source", default="engWEB2015eb", help="SWORD module of the source side")
    ap.add_argument("--target", default="spaRV1909eb", help="SWORD module of the target side")
    ap.add_argument("--val-book", default="Jonah", help="book held out for validation")
    ap.add_argument("--test-book", default="Ruth", help="book held out for the test (BLEU)")
    a = ap.parse_args()
    for b in (a.val_book, a.test_book):
        if b not in BOOKS:
            sys.exit(f"bible_pairs: unknown book '{b}'; use a name like {BOOKS[31]!r} or {BOOKS[7]!r}")
    if a.val_book == a.test_book:
        sys.exit("bible_pairs: --val-book and --test-book must differ")
    src, tgt = verses(a.source), verses(a.target)
    order = {b: i for i, b in enumerate(BOOKS)}
    keys = sorted(set(src) & set(tgt), key=lambda k: (order[k[0]], k[1], k[2]))
    split = {"train": [], "val": [], "test": []}
    dropped = 0
    for k in keys:
        s, t = src[k], tgt[k]
        if not s or not t or max(len(s), len(t)) > MAX_RATIO * min(len(s), len(t)):
            dropped += 1
            continue
        part = "val" if k[0] == a.val_book else "test" if k[0] == a.test_book else "train"
        split[part].append(f"{s}\t{t}\n")
    os.makedirs(a.out_dir, exist_ok=True)
    for part, lines in split.items():
        path = os.path.join(a.out_dir, f"bible_{part}.tsv")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
    print(f"bible_pairs: {len(keys)} verses in both, {dropped} dropped (an empty side or lengths "
          f"over {MAX_RATIO:g}x apart); train {len(split['train'])}, val {len(split['val'])} "
          f"({a.val_book}), test {len(split['test'])} ({a.test_book}) in {a.out_dir}")


if __name__ == "__main__":
    main()
