// Package tree reads a configuration file, JSON (with comments and
// trailing commas) or YAML, into one format-neutral tree of scalars (kept
// as text, as .NET configuration keeps them), objects (keys in file order,
// duplicates kept) and lists, for config to bind by reflection: the two
// formats then obey exactly the same rules. It skips a UTF-8 BOM, bounds
// untrusted input (nesting deeper than 1000 levels, more than 100000 values
// after YAML alias expansion, a second YAML document) and tells a file that
// does not parse as a [SyntaxError] in the operator's words, at its line and
// column.
package tree
