"""Pattern types: dates, amounts of money, phone numbers, e-mail addresses, URLs, Chinese resident ID
numbers and IPv4 addresses, found with regular expressions and checked where a check exists.

Each pattern is a regular expression plus an optional check of the match (a real calendar date, the
ID number's checksum, the digit count of a phone number): a match that fails its check is not a hit.
Digits are ASCII or full-width (０-９), never other scripts' digits (Python's `\\d` would take those).
Matches do not start or end inside a longer run of digits or letters, so an 18-digit ID number never
also yields the 11-digit "mobile number" inside it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Callable, Iterator

D = "[0-9０-９]"                                       # one digit, ASCII or full-width
FULL_WIDTH = str.maketrans("０１２３４５６７８９", "0123456789")
CN_NUMERAL = "[零〇一二三四五六七八九十百千万亿两]"
CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"   # ideographs and CJK punctuation


def digits(text: str) -> str:
    return text.translate(FULL_WIDTH)


# ---- checks -------------------------------------------------------------------------------------------

def real_date(year: int | None, month: int, day: int | None) -> bool:
    """A date that exists (29 February only in a leap year, or with no year given)."""
    if not 1 <= month <= 12:
        return False
    if day is None:
        return year is None or 1000 <= year <= 2999
    try:
        date(year if year is not None else 2000, month, day)      # 2000 is a leap year
    except ValueError:
        return False
    return year is None or 1000 <= year <= 2999


ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
ID_CHECK = "10X98765432"


def id_check_character(first17: str) -> str:
    """The 18th character of a Chinese resident ID number (GB 11643-1999, ISO 7064 MOD 11-2)."""
    return ID_CHECK[sum(int(c) * w for c, w in zip(first17, ID_WEIGHTS)) % 11]


def valid_id_number(text: str) -> bool:
    """18 characters: a region code, a birth date that exists, a sequence number, and the check character."""
    text = digits(text).upper()
    if len(text) != 18 or not text[:17].isdigit() or text[0] == "0":
        return False
    year, month, day = int(text[6:10]), int(text[10:12]), int(text[12:14])
    return 1850 <= year <= 2100 and real_date(year, month, day) and text[17] == id_check_character(text[:17])


def international_phone_end(m: re.Match) -> int | None:
    """Where an international number ends: at most 15 digits (E.164), at least 8 here. Groups after the
    15th digit belong to what follows ("+86 13812345678 2024" is a number, then a year)."""
    count, end = 0, None
    for group in re.finditer(r"[^\s-]+", m.group()):
        count += sum(c.isdigit() for c in digits(group.group()))
        if count > 15:
            break
        if count >= 8:
            end = m.start() + group.end()
    return end


# ---- the patterns -------------------------------------------------------------------------------------

MONTHS = {name: n for n, names in enumerate((
    ("January", "Jan"), ("February", "Feb"), ("March", "Mar"), ("April", "Apr"), ("May",), ("June", "Jun"),
    ("July", "Jul"), ("August", "Aug"), ("September", "Sep", "Sept"), ("October", "Oct"),
    ("November", "Nov"), ("December", "Dec")), start=1) for name in names}
MONTH = "(?P<mname>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
NOT_DIGIT_BEFORE, NOT_DIGIT_AFTER = "(?<![0-9０-９])", "(?![0-9０-９])"
NOT_WORD_BEFORE, NOT_WORD_AFTER = r"(?<![0-9０-９A-Za-z_])", r"(?![0-9０-９A-Za-z_])"


def _chinese_date(m: re.Match) -> bool:
    year = int(digits(m["y"])) if m["y"] else None
    return real_date(year, int(digits(m["m"])), int(digits(m["d"])) if m["d"] else None)


def _numeric_date(m: re.Match) -> bool:
    return real_date(int(digits(m["y"])), int(digits(m["m"])), int(digits(m["d"])))


def _english_date(m: re.Match) -> bool:
    year = int(m["y"]) if m["y"] else None
    return real_date(year, MONTHS[m["mname"]], int(m["d"]))


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern
    check: Callable[[re.Match], bool] | None = None         # a match that fails it is no hit
    end: Callable[[re.Match], int | None] | None = None      # where the hit ends if not where the match does

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        for m in self.regex.finditer(text):
            if self.check is not None and not self.check(m):
                continue
            end = m.end() if self.end is None else self.end(m)
            if end is not None and end > m.start():
                yield m.start(), end


AMOUNT = rf"{D}{{1,3}}(?:[,，]{D}{{3}})+(?:\.{D}+)?|{D}+(?:\.{D}+)?"
SCALE = r"(?:\s?(?:万亿|千万|百万|万|亿)|\s?(?:k|K|m|M|bn|million|billion|thousand)(?![A-Za-z]))?"
CURRENCY_CODE = "(?:USD|CNY|RMB|EUR|GBP|JPY|HKD|CHF|AUD|CAD|SGD)"
# Not a bare 块 ("3块蛋糕" is three pieces of cake), and Chinese numerals only with a 十/百/千/万/亿 ("二元一次方程").
CHINESE_UNIT = "(?:万亿元|亿元|万元|千元|元|块钱|美元|欧元|英镑|日元|港元|港币|韩元|卢布|人民币)"

PATTERNS: dict[str, list[Pattern]] = {
    "date": [
        # 2024年3月5日 · 2024年3月 · 3月5日 (日 or 号), digits ASCII or full-width; a month alone is no date
        Pattern(re.compile(rf"{NOT_DIGIT_BEFORE}(?P<y>{D}{{4}})\s?年\s?(?P<m>{D}{{1,2}})\s?月"
                           rf"(?:\s?(?P<d>{D}{{1,2}})\s?[日号])?"), _chinese_date),
        Pattern(re.compile(rf"(?<!年)(?<!年\s){NOT_DIGIT_BEFORE}(?P<y>)(?P<m>{D}{{1,2}})\s?月\s?(?P<d>{D}{{1,2}})\s?[日号]"),
                _chinese_date),
        # 2024-03-05 · 2024/3/5 · 2024.03.05
        Pattern(re.compile(rf"{NOT_DIGIT_BEFORE}(?P<y>{D}{{4}})(?P<sep>[-/.])(?P<m>{D}{{1,2}})(?P=sep)"
                           rf"(?P<d>{D}{{1,2}}){NOT_DIGIT_AFTER}(?!\.[0-9])"), _numeric_date),
        # March 5, 2024 · Mar. 5th 2024 · March 5
        Pattern(re.compile(rf"(?<![A-Za-z]){MONTH}\s(?P<d>[0-9]{{1,2}})(?:st|nd|rd|th)?"
                           rf"(?:,?\s(?P<y>[0-9]{{4}}))?{NOT_WORD_AFTER}"), _english_date),
        # 5 March 2024
        Pattern(re.compile(rf"{NOT_WORD_BEFORE}(?P<d>[0-9]{{1,2}})\s{MONTH}\s(?P<y>[0-9]{{4}}){NOT_WORD_AFTER}"),
                _english_date),
    ],
    "money": [
        # ¥1,200.50 · $5 million · € 30 · US$20
        Pattern(re.compile(rf"(?<![A-Za-z])(?:US|HK|A|C|S)?[¥￥$€£]\s?(?:{AMOUNT}){SCALE}{NOT_DIGIT_AFTER}")),
        # USD 1,000 · 100 USD · RMB 50万
        Pattern(re.compile(rf"{NOT_WORD_BEFORE}{CURRENCY_CODE}\s?(?:{AMOUNT}){SCALE}{NOT_DIGIT_AFTER}")),
        Pattern(re.compile(rf"{NOT_DIGIT_BEFORE}(?:{AMOUNT}){SCALE}\s?{CURRENCY_CODE}{NOT_WORD_AFTER}")),
        # 3.5亿元 · 100万美元 · 人民币5000元 · 三十万元
        Pattern(re.compile(rf"(?:人民币)?{NOT_DIGIT_BEFORE}(?:{AMOUNT})\s?(?:万|亿|千万|百万)?{CHINESE_UNIT}")),
        Pattern(re.compile(rf"(?<!{CN_NUMERAL})(?={CN_NUMERAL}*[十百千万亿]){CN_NUMERAL}+{CHINESE_UNIT}")),
        # 20 dollars · 5 euros · 300 yuan
        Pattern(re.compile(rf"{NOT_DIGIT_BEFORE}(?:{AMOUNT}){SCALE}\s(?:dollars?|euros?|yuan|pounds?)"
                           rf"{NOT_WORD_AFTER}")),
    ],
    "phone": [
        # +86 138 1234 5678 · +1 (415) 555-0132 · +44 20 7946 0958
        Pattern(re.compile(rf"(?<![0-9A-Za-z+])\+(?:{D}{{7,15}}|{D}{{1,3}}(?:[\s-]?\({D}{{1,4}}\))?(?:[\s-]{D}{{1,11}}){{1,5}})"
                           rf"{NOT_DIGIT_AFTER}"),
                end=international_phone_end),
        # Chinese mobile: 13812345678 · 138-1234-5678 · 138 1234 5678
        Pattern(re.compile(rf"{NOT_WORD_BEFORE}1[3-9]{D}(?P<s>[-\s]?){D}{{4}}(?P=s){D}{{4}}{NOT_WORD_AFTER}")),
        # Chinese landline: 010-12345678 · 0755-1234567 · (010) 12345678
        Pattern(re.compile(rf"{NOT_WORD_BEFORE}(?:0{D}{{2,3}}-|\(0{D}{{2,3}}\)\s?){D}{{7,8}}{NOT_WORD_AFTER}")),
        # Service numbers: 400-810-8888 · 800-820-8820
        Pattern(re.compile(rf"{NOT_WORD_BEFORE}[48]00-?{D}{{3}}-?{D}{{4}}{NOT_WORD_AFTER}")),
    ],
    "email": [
        Pattern(re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
                           r"(?![A-Za-z0-9-])")),
    ],
    "url": [
        # The URL ends before whitespace, CJK text or punctuation, and without trailing sentence punctuation.
        Pattern(re.compile(rf"(?<![A-Za-z0-9])(?:https?://|www\.)[^\s<>\"'{CJK}]*[^\s<>\"'{CJK}.,;:!?)\]]")),
    ],
    "id_number": [
        Pattern(re.compile(rf"{NOT_WORD_BEFORE}[1-9]{D}{{16}}[0-9Xx]{NOT_WORD_AFTER}"),
                lambda m: valid_id_number(m.group())),
    ],
    "ipv4": [
        Pattern(re.compile(r"(?<![0-9.])(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}"
                           r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?![0-9]|\.[0-9])")),
    ],
}


def find(type_id: str, text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of every hit of one pattern type in the text (its patterns may overlap each other)."""
    for pattern in PATTERNS[type_id]:
        yield from pattern.find(text)
