# JSON round trip: records built, serialised, parsed back and summarised per key.
import json

records = []
for i in range(6000):
    records.append({
        "id": i,
        "name": f"item-{i:05d}",
        "price": round((i * 37 % 1000) / 10 + 0.99, 2),
        "tags": ["red" if i % 3 == 0 else "blue", "sale" if i % 7 == 0 else "full"],
        "stock": {"north": i % 13, "south": i % 17},
    })
text = json.dumps(records, sort_keys=True)
parsed = json.loads(text)
totals = {}
for r in parsed:
    for tag in r["tags"]:
        totals[tag] = round(totals.get(tag, 0) + r["price"] * (r["stock"]["north"] + r["stock"]["south"]), 2)
len(text), sorted(totals.items())
