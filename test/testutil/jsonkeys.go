package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DuplicateKeys returns the keys that occur more than once in one JSON
// object of line, at any depth: encoding/json keeps the last and hides the
// rest, and so do most log pipelines.
func DuplicateKeys(line []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	var dups []string
	var walk func() error
	walk = func() error {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				ks, ok := k.(string)
				if !ok {
					return fmt.Errorf("key %v is not a string", k)
				}
				if seen[ks] {
					dups = append(dups, ks)
				}
				seen[ks] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	return dups, walk()
}
