"""The gazetteer model: dictionaries and patterns, selected by a flat schema, no weights.

A schema's keys name the types to extract, in Chinese or English ({"日期": null} or {"date": null});
every span of the result carries the key as the schema wrote it. Types:

  pattern types      日期 date · 金额 money · 电话 phone · 邮箱 email · 网址 url · 身份证号 id_number · IP地址 ipv4
  dictionary types   国家 country · 省份 province · 城市 city · 组织机构 organization
  both at once       地理位置 location = 国家 + 省份 + 城市
  user dictionaries  the file name of each TYPE.txt in the weights folder (a built-in name adds to that type)

English names match in any case ("Date", "EMAIL"). How hits are chosen: every dictionary hit and
pattern hit of every known type is collected, then the leftmost-longest ones that do not overlap are
kept (the earliest start wins; among equal starts the longest), and only then are the schema's types
kept. So a longer name of another type still wins: "北京大学" is an organisation, and asking for cities
finds no "北京" inside it; an e-mail address hides the company name inside it.

Spans carry no confidence: a dictionary or pattern hit is exact, not a probability, and confidence
thresholds keep spans without one.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from contracts import Document, FlatSchema, ModelFamily, Reads, RuleModel, SchemaType, Span, TaskPreset, WeightsError

from . import patterns
from .dictionary import Dictionary, builtin_entries, read_folder

PATTERN_TYPES = [SchemaType("date", ("日期",)), SchemaType("money", ("金额",)), SchemaType("phone", ("电话",)),
                 SchemaType("email", ("邮箱",)), SchemaType("url", ("网址",)), SchemaType("id_number", ("身份证号",)),
                 SchemaType("ipv4", ("IP地址",))]
DICTIONARY_TYPES = [SchemaType("country", ("国家",)), SchemaType("province", ("省份",)), SchemaType("city", ("城市",)),
                    SchemaType("organization", ("组织机构",))]
COMPOSITE_TYPES = [SchemaType("location", ("地理位置",), frozenset({"country", "province", "city"}))]
BUILTIN = FlatSchema(PATTERN_TYPES + DICTIONARY_TYPES + COMPOSITE_TYPES, example='{"日期": null, "city": null}')


PRESETS = [
    TaskPreset("places_and_organisations", "Places and organisations (中文)",
               "北大西洋议会春季会议26日在西班牙巴塞罗那闭幕。阿里巴巴的总部位于浙江省杭州市，腾讯在深圳。",
               {"国家": None, "省份": None, "城市": None, "组织机构": None},
               "Built-in dictionaries of countries, Chinese provinces, major cities and well-known organisations."),
    TaskPreset("contacts", "Dates and contacts (中文)",
               "请于2024年3月5日前联系张先生：手机138-1234-5678，座机010-62751234，"
               "邮箱 zhang.san@example.com，官网 https://www.example.com/about 。",
               {"日期": None, "电话": None, "邮箱": None, "网址": None},
               "Patterns: dates, mobile and landline numbers, e-mail addresses, URLs."),
    TaskPreset("finance", "Amounts and dates (中文)",
               "2023年宁德时代营收4009亿元，海外订单约USD 1,200万；公告于3月15日发布，目标价￥260.5。",
               {"日期": None, "金额": None, "组织机构": None},
               "Amounts in 元/万元/亿元, with ¥/$/€ or a currency code."),
    TaskPreset("english", "English entities and contacts",
               "On March 5, 2024, Tencent and the World Bank met in Geneva, Switzerland. "
               "Call +41 22 791 2111 or write to press@example.org; budget $2.5 million.",
               {"date": None, "organization": None, "city": None, "country": None, "phone": None,
                "email": None, "money": None},
               "English names match on word boundaries; the ignore_case option relaxes case."),
    TaskPreset("identifiers", "ID numbers and addresses (中文)",
               "申请人身份证号11010519491231002X，户籍在中国北京市，登录IP 192.168.1.10。",
               {"身份证号": None, "IP地址": None, "地理位置": None},
               "Resident ID numbers are kept only with a real birth date and a valid check character."),
]


class Gazetteer(ModelFamily):
    name = "gazetteer"
    title = "Gazetteer (dictionaries + patterns, no weights; example plugin)"
    tasks = {p.name: p for p in PRESETS}
    reads = Reads.SCHEMA
    needs_weights = False
    options = {"ignore_case": False, "builtin_dictionaries": True}

    def validate(self, document: Document) -> None:
        """The schema's shape. Whether each key is a known type depends on the user dictionaries of the loaded
        model, so that is checked when it runs (LoadedGazetteer.check_slice)."""
        BUILTIN.check_shape(document)

    def load(self, weights: Path, device: str = "cpu", dtype: str = "fp32") -> "LoadedGazetteer":
        """`weights` is an optional folder of user dictionaries (TYPE.txt); when it does not exist the built-in
        dictionaries are used alone. It runs on the CPU whatever device is asked for."""
        weights = Path(weights)
        if weights.exists() and not weights.is_dir():
            raise WeightsError(f"{weights} is a file; the gazetteer's weights are a folder of dictionaries, one "
                               "TYPE.txt a type with one entry a line (docs/plugins.md)")
        user = read_folder(weights) if weights.is_dir() else {}
        model = LoadedGazetteer(self, weights, user)
        model.set_dtype(dtype)
        return model


class LoadedGazetteer(RuleModel):
    def __init__(self, family: Gazetteer, weights: Path, user: dict[str, list[str]]):
        super().__init__(family, weights)
        self.user_types: dict[str, str] = {}            # user dictionary file stem -> the type id it adds to
        self.schema = BUILTIN.extended(())
        for stem in user:
            found = self.schema.find(stem)
            if found is None:
                self.schema.add(found := SchemaType(stem))
            self.user_types[stem] = found.id
        # With and without the built-in dictionaries (the builtin_dictionaries option), built once here.
        self.own = Dictionary()
        for stem, entries in user.items():
            self.own.add(self.user_types[stem], entries)
        self.full = Dictionary()
        for type_id in sorted(t.id for t in DICTIONARY_TYPES):
            self.full.add(type_id, builtin_entries(type_id))
        for type_id, entries in self.own.entries.items():
            self.full.add(type_id, entries)
        self.own.build()
        self.full.build()

    def check_slice(self, documents) -> None:
        """Every schema's keys are known types (built-in, or the user dictionaries') before the first result."""
        where = f" (user dictionaries: {self.weights})" if self.user_types else ""
        for document in documents:
            self.schema.select(document, where)

    def find(self, document: Document, ignore_case: bool, builtin_dictionaries: bool) -> list[list[Span]]:
        keys = self.schema.select(document)
        dictionary = self.full if builtin_dictionaries else self.own
        chosen = leftmost_longest(candidates(document.text, dictionary, ignore_case))
        return [[Span(name, document.text[start:end], (start, end))]
                for (start, end), types in chosen for name, covers in keys if covers & types]

    def describe(self) -> dict:
        return {**super().describe(), "dictionaries": self.full.types(),
                "user_dictionaries": dict(self.user_types)}


def candidates(text: str, dictionary: Dictionary, ignore_case: bool) -> dict[tuple[int, int], set[str]]:
    """(start, end) -> the type ids found there: every dictionary hit and every pattern hit of every type."""
    found: dict[tuple[int, int], set[str]] = defaultdict(set)
    for hit in dictionary.find(text, ignore_case):
        found[hit.start, hit.end].add(hit.type_id)
    for type_id in patterns.PATTERNS:
        for span in patterns.find(type_id, text):
            found[span].add(type_id)
    return found


def leftmost_longest(found: dict[tuple[int, int], set[str]]) -> list[tuple[tuple[int, int], set[str]]]:
    """The non-overlapping spans, chosen from the left: the earliest start wins, then the longest."""
    chosen, at = [], 0
    for start, end in sorted(found, key=lambda s: (s[0], s[0] - s[1])):
        if start >= at:
            chosen.append(((start, end), found[start, end]))
            at = end
    return chosen
