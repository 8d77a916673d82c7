"""The seeded synthetic world: entities, relations and facts, rendered into a document corpus.

One world serves every task family. Each fact is written as a document from one of several templates, and
each fact gets near-duplicate *distractors*: the same kind of sentence about an entity with an almost
identical name (``ORD-RISFEN-37`` vs ``ORD-RISFAN-37``, ``Mara Quell`` vs ``Mara Quill``) and a different value, so
that dense retrieval is genuinely imperfect.

Everything is a pure function of :class:`~edo_gym.config.WorldConfig`: same config, same corpus, same hash.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

from edo_gym.config import DOMAINS, WorldConfig
from edo_gym.world.text import EntityLinker

MONTHS: tuple[str, ...] = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                           "October", "November", "December")  # fmt: skip

_FIRST = ("Mara", "Tobin", "Elsa", "Idris", "Nadia", "Oren", "Priya", "Casimir", "Lena", "Hugo", "Ines", "Rafael",
          "Sunniva", "Teodor", "Yara", "Bram", "Cleo", "Dario", "Freya", "Gideon", "Hana", "Jonas", "Kiri", "Lucan",
          "Mirela", "Niko", "Odile", "Pavel", "Quinn", "Rosa", "Silas", "Talia", "Ulric", "Vera", "Wren", "Ximena")  # fmt: skip
_LAST = ("Quell", "Varga", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Brandt", "Castell", "Duval", "Eriksen",
         "Farrow", "Galvez", "Holm", "Ivers", "Jansen", "Kovac", "Larsen", "Mendez", "Novak", "Ortega", "Petrov",
         "Rask", "Sato", "Thorne", "Ullman", "Voss", "Weller", "Yilmaz", "Zoric", "Abbott", "Bishop", "Carver")  # fmt: skip
_SYLL = ("var", "bel", "mor", "tan", "quil", "dor", "ash", "ven", "lor", "cai", "ris", "mon", "zel", "ther", "ka",
         "no", "el", "sta", "gra", "fen", "ost", "pira", "lum", "sor")  # fmt: skip
_COMPANY_SUFFIX = ("Systems", "Labs", "Holdings", "Works", "Dynamics", "Foods", "Logistics", "Media")
_COUNTRIES = ("Norland", "Estavia", "Maribo", "Quentria", "Solvany", "Ardel", "Tirrane", "Valcor")
_CARRIERS = ("Swiftline", "Parcelo", "Boxtrail", "Northway Post", "Kestrel Freight", "Orbit Express", "Lumen Cargo",
             "Tidewater Mail", "Redwing Parcel", "Summit Couriers")  # fmt: skip
_STORES = ("Alder", "Birch", "Cedar", "Dogwood", "Elm", "Fir", "Ginkgo", "Hazel", "Ivy", "Juniper", "Kapok", "Larch",
           "Maple", "Nutmeg", "Oak", "Pine", "Quince", "Rowan", "Spruce", "Tamarind", "Umbrella", "Viburnum", "Willow",
           "Yew")  # fmt: skip


@dataclass(frozen=True)
class Relation:
    """A relation: subject kind -> value kind, stored in one document domain."""

    name: str
    subject_kind: str
    value_kind: str
    domain: str
    question: str  # query template; {x} is the subject
    templates: tuple[str, ...]  # document templates; {s} subject, {v} value


RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation("mentor", "person", "person", "people", "Who is the mentor of {x}?",
                 ("{s} was mentored by {v} early in their career.", "{v} has been the mentor of {s} for years.",
                  "Records list {v} as the mentor of {s}.")),
        Relation("employer", "person", "company", "people", "Which company does {x} work for?",
                 ("{s} works for {v}.", "{s} is employed at {v} as a senior specialist.",
                  "According to the staff directory, {s} is on the payroll of {v}.")),
        Relation("birth_city", "person", "city", "people", "In which city was {x} born?",
                 ("{s} was born in {v}.", "Born in {v}, {s} grew up near the old harbour.",
                  "The birthplace of {s} is the city of {v}.")),
        Relation("founder", "company", "person", "companies", "Who founded {x}?",
                 ("{s} was founded by {v}.", "{v} started {s} in a small rented office.",
                  "The founder of {s} is {v}.")),
        Relation("headquarters", "company", "city", "companies", "Where is {x} headquartered?",
                 ("{s} is headquartered in {v}.", "The head office of {s} is located in {v}.",
                  "{s} runs its operations from headquarters in {v}.")),
        Relation("founded_year", "company", "year", "companies", "In what year was {x} founded?",
                 ("{s} was founded in {v}.", "Since {v}, {s} has grown steadily.",
                  "The company {s} dates back to the year {v}.")),
        Relation("mayor", "city", "person", "places", "Who is the mayor of {x}?",
                 ("The mayor of {s} is {v}.", "{v} was elected mayor of {s} last spring.",
                  "{s} is governed by mayor {v}.")),
        Relation("country", "city", "country", "places", "In which country is {x}?",
                 ("{s} is a city in {v}.", "{s} lies in the north of {v}.", "The city of {s} belongs to {v}.")),
        Relation("shipment", "order", "shipment", "orders", "What is the tracking number of order {x}?",
                 ("Order {s} was dispatched under tracking number {v}.", "Order {s} shipped; its tracking number is {v}.",
                  "Order {s}: shipment created, tracking {v}.")),
        Relation("carrier", "shipment", "carrier", "shipping", "Which carrier handles shipment {x}?",
                 ("Shipment {s} is handled by {v}.", "Shipment {s} was picked up by {v} at the warehouse.",
                  "Shipment {s}: carrier {v}.")),
        Relation("refund_window", "carrier", "duration", "policies", "What is the refund window for deliveries by {x}?",
                 ("Late deliveries by {s} can be refunded within {v}.",
                  "Policy: for parcels shipped with {s}, customers may claim a refund within {v}.",
                  "The refund window for {s} deliveries is {v}.")),
    )
}  # fmt: skip
for _m in MONTHS:
    RELATIONS[f"revenue_{_m.lower()}"] = Relation(
        f"revenue_{_m.lower()}",
        "store",
        "amount",
        "sales",
        f"What was the revenue of the {{x}} store in {_m}?",
        (
            f"The {{s}} store reported revenue of {{v}} thousand in {_m}.",
            f"In {_m}, revenue at the {{s}} store came to {{v}} thousand.",
            f"Sales ledger, {_m}: {{s}} store, {{v}} thousand in revenue.",
        ),
    )

#: Refund windows (days) a duration value is drawn from.
DURATION_DAYS: tuple[int, ...] = (7, 10, 14, 21, 30, 45, 60, 90)

# -- tiered refund policies (``WorldConfig.tiered_refunds``; see edo_gym.world.extra_step) ----------------------
#: Customer membership tiers, lowest first (a higher tier never has a shorter refund window).
TIERS: tuple[str, ...] = ("Standard", "Silver", "Gold")
#: Share of the customers in each tier.
TIER_SHARES: tuple[float, ...] = (0.5, 0.3, 0.2)
#: What the general refund-window document of a carrier with a tiered policy states instead of a number.
TIER_RULE = "the period set by the customer's membership tier"
#: The question about a tier's refund window, ``{t}`` the tier and ``{x}`` the carrier (a plan step fills both in).
TIER_WINDOW_QUESTION = "What is the refund window for {t} members on deliveries by {x}?"
#: The relation of each tier's refund window (subject: a carrier), by tier.
TIER_WINDOW_RELATIONS: dict[str, str] = {tier: f"refund_window_{tier.lower()}" for tier in TIERS}
MEMBERSHIP_TIER = "membership_tier"
#: Relations a world holds facts of only with ``WorldConfig.tiered_refunds``.
TIER_RELATIONS: frozenset[str] = frozenset({MEMBERSHIP_TIER, *TIER_WINDOW_RELATIONS.values()})
#: Distinguishes the tier generator's seed from any other use of ``WorldConfig.seed`` ("tier" in ASCII).
_TIER_STREAM = 0x74696572

RELATIONS[MEMBERSHIP_TIER] = Relation(
    MEMBERSHIP_TIER, "shipment", "tier", "orders", "Which membership tier does the customer of shipment {x} hold?",
    ("The customer of shipment {s} is a {v} member.", "Shipment {s} belongs to a customer with {v} membership.",
     "Customer record for shipment {s}: membership tier {v}."),
)  # fmt: skip
for _tier, _name in TIER_WINDOW_RELATIONS.items():
    RELATIONS[_name] = Relation(
        _name,
        "carrier",
        "duration",
        "policies",
        TIER_WINDOW_QUESTION.replace("{t}", _tier),
        (
            f"{_tier} members: late deliveries by {{s}} can be refunded within {{v}}.",
            f"Policy for {_tier} members: parcels shipped with {{s}} can be refunded within {{v}}.",
            f"For {_tier} members, the refund window for {{s}} deliveries is {{v}}.",
        ),
    )

#: Relations whose value is another entity, usable as an inner hop of a multi-hop chain.
CHAIN_RELATIONS: dict[str, tuple[str, ...]] = {
    "person": ("mentor", "employer", "birth_city"),
    "company": ("founder", "headquarters"),
    "city": ("mayor",),
}
#: Relations allowed as the last hop of a multi-hop chain.
FINAL_RELATIONS: dict[str, tuple[str, ...]] = {
    "person": ("mentor", "employer", "birth_city"),
    "company": ("founder", "headquarters", "founded_year"),
    "city": ("mayor", "country"),
}


@dataclass(frozen=True)
class Document:
    """One document of the corpus. ``is_distractor`` documents are about a near-duplicate, non-existent entity."""

    doc_id: str
    text: str
    domain: str
    subject: str
    relation: str
    value: str
    is_distractor: bool


class World:
    """Entities, facts and the document corpus of one seeded world."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        rng = np.random.default_rng(config.seed)
        self.entities: dict[str, list[str]] = {}
        self.facts: dict[tuple[str, str], str] = {}
        self._make_entities(rng)
        self._make_facts(rng)
        #: Carriers whose refund window depends on the customer's membership tier (none without ``tiered_refunds``).
        self.tiered_carriers: frozenset[str] = frozenset()
        if config.tiered_refunds:
            self._make_tiers()
        self.documents: list[Document] = self._make_documents(rng)
        self.kind_of: dict[str, str] = {name: kind for kind, names in self.entities.items() for name in names}
        #: canonical name -> other surface forms a correct answer may take (``"Quell, Mara"`` for ``"Mara Quell"``).
        self.aliases: dict[str, tuple[str, ...]] = {
            name: (f"{name.split()[-1]}, {' '.join(name.split()[:-1])}", f"{name.split()[-1]} {' '.join(name.split()[:-1])}")
            for name in self.entities["person"]
        }
        self.subjects_by_relation: dict[str, list[str]] = {}
        for subject, rel_name in self.facts:
            self.subjects_by_relation.setdefault(rel_name, []).append(subject)
        self._linkers: dict[float, EntityLinker] = {}
        self._memories: dict[tuple, dict[tuple[str, str], str]] = {}
        self.corpus_hash = hashlib.sha256(
            "\n".join(f"{d.doc_id}\t{d.domain}\t{d.text}" for d in self.documents).encode()
        ).hexdigest()[:16]

    # -- entities ---------------------------------------------------------------------------------------------
    def _unique(self, rng: np.random.Generator, count: int, make) -> list[str]:
        out: list[str] = []
        seen: set[str] = set()
        while len(out) < count:
            name = make(rng)
            if name.lower() not in seen:
                seen.add(name.lower())
                out.append(name)
        return out

    def _make_entities(self, rng: np.random.Generator) -> None:
        c = self.config

        def syllables(r: np.random.Generator, n: int) -> str:
            return "".join(r.choice(_SYLL) for _ in range(n)).capitalize()

        max_people = len(_FIRST) * len(_LAST)
        if c.n_people > max_people:
            raise ValueError(f"WorldConfig.n_people must be <= {max_people} (distinct names available), got {c.n_people}")
        self.entities["person"] = self._unique(rng, c.n_people, lambda r: f"{r.choice(_FIRST)} {r.choice(_LAST)}")
        self.entities["company"] = self._unique(rng, c.n_companies, lambda r: f"{syllables(r, 2)} {r.choice(_COMPANY_SUFFIX)}")
        self.entities["city"] = self._unique(rng, c.n_cities, lambda r: syllables(r, int(r.integers(2, 4))))
        # IDs mix a pronounceable code with digits: dense retrievers are notoriously weak on pure digit strings.
        self.entities["order"] = self._unique(
            rng, c.n_orders, lambda r: f"ORD-{syllables(r, 2).upper()}-{int(r.integers(10, 99))}"
        )
        self.entities["shipment"] = self._unique(
            rng, c.n_orders, lambda r: f"TRK-{syllables(r, 2).upper()}-{int(r.integers(100, 999))}"
        )
        if c.n_carriers > len(_CARRIERS):
            raise ValueError(f"WorldConfig.n_carriers must be <= {len(_CARRIERS)}, got {c.n_carriers}")
        self.entities["carrier"] = list(_CARRIERS[: c.n_carriers])
        if c.n_stores > len(_STORES):
            raise ValueError(f"WorldConfig.n_stores must be <= {len(_STORES)}, got {c.n_stores}")
        self.entities["store"] = list(_STORES[: c.n_stores])
        self.entities["country"] = list(_COUNTRIES)
        self.months = MONTHS[: c.n_months]

    def _value_for(self, rng: np.random.Generator, kind: str, exclude: str | None = None) -> str:
        if kind == "year":
            return str(int(rng.integers(1890, 2021)))
        if kind == "duration":
            return f"{int(rng.choice(list(DURATION_DAYS)))} days"
        if kind == "amount":
            return str(int(rng.integers(100, 999)))
        pool = self.entities[kind]
        while True:
            value = pool[int(rng.integers(len(pool)))]
            if value != exclude or len(pool) == 1:
                return value

    def _make_facts(self, rng: np.random.Generator) -> None:
        for rel in RELATIONS.values():
            if rel.subject_kind == "store" and rel.name.removeprefix("revenue_").capitalize() not in self.months:
                continue
            if rel.name in TIER_RELATIONS:  # drawn by _make_tiers, from a generator of its own
                continue
            subjects = self.entities[rel.subject_kind]
            if rel.name == "shipment":
                # one shipment per order, a bijection
                for order, shipment in zip(subjects, self.entities["shipment"], strict=True):
                    self.facts[(order, rel.name)] = shipment
                continue
            for subject in subjects:
                self.facts[(subject, rel.name)] = self._value_for(rng, rel.value_kind, exclude=subject)

    def _make_tiers(self) -> None:
        """Tiered refund policies: each shipment's customer holds a membership tier, and half the carriers (at least
        one, at most all but one) set their refund window by it. Such a carrier's general refund-window fact states
        :data:`TIER_RULE` instead of a number, and it has one window per tier (longer for a higher tier).

        Drawn from a generator of its own, after every other fact: the other facts, and the documents written before
        the new ones, are those of the world without tiers (only the tiered carriers' general window is restated)."""
        rng = np.random.default_rng((self.config.seed, _TIER_STREAM))
        self.entities["tier"] = list(TIERS)
        carriers = self.entities["carrier"]
        n_tiered = min(len(carriers) - 1, max(1, len(carriers) // 2))
        self.tiered_carriers = frozenset(carriers[int(i)] for i in rng.permutation(len(carriers))[:n_tiered])
        for shipment in self.entities["shipment"]:
            self.facts[(shipment, MEMBERSHIP_TIER)] = TIERS[int(rng.choice(len(TIERS), p=TIER_SHARES))]
        for carrier in carriers:
            if carrier not in self.tiered_carriers:
                continue
            self.facts[(carrier, "refund_window")] = TIER_RULE
            days = sorted(int(d) for d in rng.choice(DURATION_DAYS, size=len(TIERS), replace=False))
            for tier, d in zip(TIERS, days, strict=True):
                self.facts[(carrier, TIER_WINDOW_RELATIONS[tier])] = f"{d} days"

    # -- documents --------------------------------------------------------------------------------------------
    @staticmethod
    def near_duplicate(name: str, rng: np.random.Generator) -> str:
        """A name that differs from ``name`` by one small edit: a changed vowel, else two swapped digits."""
        chars = list(name)
        vowels = [i for i, ch in enumerate(chars) if ch.lower() in "aeiou" and i > 0]
        if vowels:
            k = int(rng.choice(vowels))
            new = str(rng.choice([v for v in "aeiouy" if v != chars[k].lower()]))
            chars[k] = new.upper() if chars[k].isupper() else new
            return "".join(chars)
        digits = [i for i, ch in enumerate(chars) if ch.isdigit()]
        if len(digits) >= 2:
            i, j = digits[-2], digits[-1]
            chars[i], chars[j] = chars[j], chars[i]
            if chars[i] != chars[j]:
                return "".join(chars)
        return name + "e"

    def _make_documents(self, rng: np.random.Generator) -> list[Document]:
        docs: list[Document] = []
        all_names = {n.lower() for names in self.entities.values() for n in names}
        for (subject, rel_name), value in self.facts.items():
            rel = RELATIONS[rel_name]
            template = rel.templates[int(rng.integers(len(rel.templates)))]
            docs.append(
                Document(f"d{len(docs)}", template.format(s=subject, v=value), rel.domain, subject, rel_name, value, False)
            )
            for _ in range(self.config.distractors_per_fact):
                twin = self.near_duplicate(subject, rng)
                if twin.lower() in all_names:  # never a real entity: a distractor must not contradict a fact
                    continue
                wrong = self._value_for(rng, rel.value_kind, exclude=value)
                template = rel.templates[int(rng.integers(len(rel.templates)))]
                docs.append(
                    Document(f"d{len(docs)}", template.format(s=twin, v=wrong), rel.domain, twin, rel_name, wrong, True)
                )
        return docs

    # -- queries ----------------------------------------------------------------------------------------------
    def canonical_queries(self) -> list[str]:
        """Every lookup query whose subject is a real entity: embedded once and cached on disk with the corpus."""
        out = []
        for subject, rel_name in self.facts:
            out.append(RELATIONS[rel_name].question.format(x=subject))
        return out

    def documents_by_domain(self) -> dict[str, list[int]]:
        by_domain: dict[str, list[int]] = {d: [] for d in DOMAINS}
        for i, doc in enumerate(self.documents):
            by_domain[doc.domain].append(i)
        return by_domain

    def linker(self, threshold: float = 0.85) -> EntityLinker:
        """A fuzzy entity linker over every entity name and alias (one per threshold, shared)."""
        linker = self._linkers.get(threshold)
        if linker is None:
            names = [n for names in self.entities.values() for n in names]
            aliases = {a: name for name, forms in self.aliases.items() for a in forms}
            linker = self._linkers[threshold] = EntityLinker(names, aliases, threshold)
        return linker

    def plausible_value(self, relation: str, rng: np.random.Generator, avoid: str | None = None) -> str:
        """A well-formed value of ``relation``'s kind (what a model makes up), different from ``avoid`` when possible."""
        return self._value_for(rng, RELATIONS[relation].value_kind, exclude=avoid)

    def parametric_memory(self, agent: str, coverage: dict[str, float], accuracy: float) -> dict[tuple[str, str], str]:
        """What a model called ``agent`` remembers: a partial, noisy copy of the facts, fixed for this world.

        Each fact is remembered with probability ``coverage[domain of its relation]``; a remembered fact holds the
        true value with probability ``accuracy``, else a plausible wrong one. Seeded by the world seed and
        ``agent``, so the same model remembers the same things in every process.
        """
        key = (agent, tuple(sorted(coverage.items())), accuracy)
        memory = self._memories.get(key)
        if memory is not None:
            return memory
        seed = zlib.crc32(f"{self.config.seed}:{agent}".encode())
        rng = np.random.default_rng(seed)
        memory = {}
        for (subject, rel_name), value in self.facts.items():
            p = coverage.get(RELATIONS[rel_name].domain, 0.0)
            draw_known, draw_right = rng.random(), rng.random()
            if draw_known < p:
                memory[(subject, rel_name)] = value if draw_right < accuracy else self.plausible_value(rel_name, rng, value)
        self._memories[key] = memory
        return memory
