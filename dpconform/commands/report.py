"""`dpconform report REPORT.json [--load LOAD-RESULTS.json] --html PATH --markdown PATH`: the reports for people
from a JSON report (dpconform.fixtures.report_render renders them), with the load results and their plots."""
from __future__ import annotations

import sys

from dpconform.commands.diff import DiffError, read
from dpconform.fixtures.report_render import with_load, write_html, write_markdown
from dpconform.fixtures.usage import USAGE_EXIT, UsageParser


def main(argv: list[str] | None = None) -> int:
    """`dpconform report REPORT.json [--load LOAD-RESULTS.json] --html PATH --markdown PATH`: the reports for
    people from a JSON report, with the load results and their plots."""
    parser = UsageParser(prog="dpconform report", description=main.__doc__.split(":", 1)[1].strip())
    parser.add_argument("report", metavar="REPORT.json", help="a conformance run's JSON report (--report)")
    parser.add_argument("--load", metavar="LOAD-RESULTS.json", help="a load run's results (--load-out DIR/load-results.json)")
    parser.add_argument("--html", metavar="PATH")
    parser.add_argument("--markdown", metavar="PATH")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not (args.html or args.markdown):
        parser.error("give --html PATH, --markdown PATH or both")
    try:
        for path, want in ((args.report, "checks"), (args.load, "load")):
            if path and read(path)[0] != want:
                raise DiffError(f"{path}: not {'a conformance report (--report)' if want == 'checks' else 'load results'}")
        doc = read(args.report)[1]
        if args.load:
            doc = with_load(doc, args.load)
    except DiffError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return USAGE_EXIT
    for path, write_one in ((args.html, write_html), (args.markdown, write_markdown)):
        if path:
            write_one(doc, path)
            print(f"wrote {path}")
    return 0
