# Sorting with keys: people sorted by several keys, by a computed key and with a stable re-sort.
people = []
seed = 7
for i in range(20000):
    seed = (seed * 48271) % 2147483647
    people.append({"name": f"p{seed % 5000:04d}", "age": 18 + seed % 60, "city": ("Oslo", "Lima", "Pune", "Kyiv")[seed % 4], "score": seed % 1000 / 10})
by_city_age = sorted(people, key=lambda p: (p["city"], -p["age"], p["name"]))
by_score = sorted(people, key=lambda p: p["score"], reverse=True)
names = sorted({p["name"] for p in people}, key=lambda s: (s[-1], s))
stable = sorted(by_score, key=lambda p: p["city"])
[p["name"] for p in by_city_age[:3]], by_score[0]["score"], names[:3], [p["name"] for p in stable[:3]]
