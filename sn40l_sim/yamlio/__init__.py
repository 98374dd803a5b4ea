"""YAML in, plain data out, with the file and line of every value: safe reading of text and files
(:mod:`.reading`, each text parsed once per process) and documents that follow ``base:`` overlays
and remember where each value came from (:mod:`.document`)."""
from sn40l_sim.yamlio.document import Document, PathError, load_document, merge_into, not_a_file, set_value, shown_path
from sn40l_sim.yamlio.json_text import parse_json
from sn40l_sim.yamlio.reading import (
    MAX_ALIAS_VALUES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    FieldPath,
    dotted,
    parse_yaml,
    path_parts,
    read_mapping_file,
    refuse_special_file,
)

__all__ = ["Document", "PathError", "load_document", "merge_into", "not_a_file", "set_value", "shown_path", "MAX_ALIAS_VALUES",
           "MAX_DEPTH", "MAX_FILE_BYTES", "FieldPath", "dotted", "parse_yaml", "path_parts", "read_mapping_file",
           "refuse_special_file", "parse_json"]
