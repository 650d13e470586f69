"""Validate spec files against meshparity's JSON Schema with a real Draft-07 validator.

Usage: check_schema.py SCHEMA SPEC... ; prints `PATH ok` or `PATH invalid: MESSAGE` per spec.
"""
import json
import sys
import tomllib

import jsonschema

schema = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)
for path in sys.argv[2:]:
    with open(path, "rb") as f:
        errors = sorted(e.message for e in validator.iter_errors(tomllib.load(f)))
    print(f"{path} ok" if not errors else f"{path} invalid: {errors[0]}")
