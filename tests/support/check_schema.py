"""Validates JSON documents against a JSON Schema (draft 2020-12, formats
checked: date, date-time, uuid, ...).

    python check_schema.py SCHEMA [DOC.json ...]

Checks SCHEMA itself first, then each document. Prints one line per problem
("DOC: at PATH: MESSAGE") and exits 1 if there was any, else prints "ok".
"""
import json
import sys

import jsonschema


def main():
    schema_path, docs = sys.argv[1], sys.argv[2:]
    with open(schema_path) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    problems = []
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        problems.append(f"{schema_path}: not a valid schema: {e.message}")
    if not problems:
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        for path in docs:
            with open(path) as f:
                doc = json.load(f)
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
                where = "/".join(str(p) for p in e.absolute_path) or "(root)"
                problems.append(f"{path}: at {where}: {e.message}")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
