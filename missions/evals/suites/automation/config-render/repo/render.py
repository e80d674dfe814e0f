"""render.py TEMPLATE VALUES.json: the template with {{name}} replaced, on stdout."""

import json
import re
import sys

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


def render(template, values):
    def one(found):
        return str(values.get(found.group(1), found.group(0)))

    text = PLACEHOLDER.sub(one, template)
    return text


if __name__ == "__main__":
    template = open(sys.argv[1]).read()
    values = json.load(open(sys.argv[2]))
    sys.stdout.write(render(template, values))
