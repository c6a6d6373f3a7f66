package deploytest

import (
	"bytes"
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

// YAMLDocuments decodes every document of the YAML stream b as a T,
// refusing fields T does not know (a map takes any). An empty document is
// T's zero value.
func YAMLDocuments[T any](b []byte) ([]T, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var out []T
	for {
		var v T
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}
