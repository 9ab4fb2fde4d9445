"""Checks the guide's links: every relative link and anchor in the built book (target/book, from
`mdbook build docs`) and every relative link in the Markdown sources (README.md, docs/src) must
lead somewhere that exists. External links (with a scheme) are not followed: the tests run offline.

Usage: python3 scripts/check-doc-links.py [BOOK_DIR]
"""

import html.parser
import pathlib
import re
import sys
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Links(html.parser.HTMLParser):
    """The links (`href`, `src`) and the ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("href", "src"):
                self.links.append(value)
            elif name in ("id", "name"):
                self.ids.add(value)


def external(link: str) -> bool:
    return bool(urllib.parse.urlsplit(link).scheme) or link.startswith("//")


def check_book(book: pathlib.Path) -> list[str]:
    pages: dict[pathlib.Path, Links] = {}
    for page in book.rglob("*.html"):
        parsed = Links()
        parsed.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parsed
    if not pages:
        return [f"{book}: no pages (was the book built?)"]
    broken = []
    for page, parsed in pages.items():
        # The 404 page is served from any depth and links from the site's root.
        if page.name == "404.html":
            continue
        for link in parsed.links:
            if external(link) or link.startswith("javascript:"):
                continue
            parts = urllib.parse.urlsplit(link)
            target = (page.parent / urllib.parse.unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(book.resolve())}: {link}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages.get(target, Links()).ids
                if urllib.parse.unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no such anchor)")
    return broken


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_sources() -> list[str]:
    broken = []
    sources = [ROOT / "README.md", *sorted((ROOT / "docs" / "src").rglob("*.md"))]
    for source in sources:
        text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.S)
        for link in MARKDOWN_LINK.findall(text):
            if external(link) or link.startswith("#"):
                continue
            path = urllib.parse.unquote(link.split("#", 1)[0])
            if not (source.parent / path).exists():
                broken.append(f"{source.relative_to(ROOT)}: {link} (no such file)")
    return broken


def main() -> None:
    book = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "book"
    broken = check_sources() + check_book(book)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    if broken:
        sys.exit(1)
    print(f"links checked: README.md, docs/src and {book}")


if __name__ == "__main__":
    main()
