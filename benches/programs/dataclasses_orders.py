# Dataclasses: an order book of frozen and ordered dataclasses, grouped and totalled.
from dataclasses import dataclass, field

@dataclass(frozen=True, order=True)
class Item:
    sku: str
    price: float

@dataclass
class Order:
    number: int
    items: list = field(default_factory=list)

    def total(self):
        return sum(item.price for item in self.items)

orders = []
for n in range(3500):
    order = Order(n)
    for k in range(n % 9 + 1):
        order.items.append(Item(f"s{(n * k) % 97:02d}", round(1.5 + (n * 31 + k) % 50 / 4, 2)))
    orders.append(order)
largest = max(orders, key=Order.total)
cheapest = min(item for order in orders for item in order.items)
unique = len({item for order in orders for item in order.items})
round(sum(o.total() for o in orders), 2), largest.number, cheapest, unique
