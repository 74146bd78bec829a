# Word counts: a generated text split, normalised and counted, then the most common words.
from collections import Counter

vocabulary = ("the data model run code python sandbox value error list dict set tuple result "
              "output input file line word count sort key map filter reduce sum mean").split()
seed, words = 12345, []
for _ in range(60000):
    seed = (seed * 1103515245 + 12345) % 2**31
    word = vocabulary[seed % len(vocabulary)]
    words.append(word.upper() if seed % 11 == 0 else word + ("," if seed % 5 == 0 else ""))
text = " ".join(words)
counts = Counter(w.strip(",.").lower() for w in text.split())
lengths = {}
for w in text.split():
    lengths[len(w)] = lengths.get(len(w), 0) + 1
counts.most_common(5), sorted(lengths.items())
