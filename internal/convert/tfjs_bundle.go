package convert

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ReadTFJSBundle reads a TF.js model shipped as JavaScript modules, as
// nsfwjs ships its models: model.min.js exports the model.json as a
// JavaScript object literal, and each shard NAME is NAME.min.js exporting
// the shard's bytes as one base64 string.
func ReadTFJSBundle(path string) ([]Tensor, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	i := bytes.Index(src, []byte("weightsManifest:"))
	if i < 0 {
		return nil, fmt.Errorf("%s: no weightsManifest", path)
	}
	lit, err := jsValue(src[i+len("weightsManifest:"):])
	if err != nil {
		return nil, fmt.Errorf("%s: weightsManifest: %w", path, err)
	}
	var groups []tfjsGroup
	if err := json.Unmarshal(lit, &groups); err != nil {
		return nil, fmt.Errorf("%s: weightsManifest: %w", path, err)
	}
	return readGroups(path, groups, func(p string) ([]byte, error) {
		js, err := os.ReadFile(filepath.Join(filepath.Dir(path), p+".min.js"))
		if err != nil {
			return nil, err
		}
		const mark = `exports="`
		k := bytes.Index(js, []byte(mark))
		if k < 0 {
			return nil, fmt.Errorf("%s.min.js: no exported string", p)
		}
		rest := js[k+len(mark):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 {
			return nil, fmt.Errorf("%s.min.js: unterminated string", p)
		}
		return base64.StdEncoding.DecodeString(string(rest[:end]))
	})
}

// jsValue takes the JavaScript array or object literal at the start of
// b (minified: bare keys, numbers like .5 and -.5, strings in double
// quotes without escapes of note) and returns it as JSON.
func jsValue(b []byte) ([]byte, error) {
	var out []byte
	depth := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return nil, fmt.Errorf("unterminated string")
			}
			out = append(out, b[i:j+1]...)
			i = j
		case c == '[' || c == '{':
			depth++
			out = append(out, c)
		case c == ']' || c == '}':
			depth--
			out = append(out, c)
			if depth == 0 {
				return out, nil
			}
		case c == '.' || (c == '-' && i+1 < len(b) && b[i+1] == '.'):
			if c == '-' {
				out = append(out, '-')
				i++
			}
			out = append(out, '0', '.')
		case c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(b) && (b[j] == '_' || b[j] == '$' || b[j] >= 'a' && b[j] <= 'z' || b[j] >= 'A' && b[j] <= 'Z' || b[j] >= '0' && b[j] <= '9') {
				j++
			}
			word := string(b[i:j])
			switch {
			case j < len(b) && b[j] == ':':
				out = append(out, '"')
				out = append(out, word...)
				out = append(out, '"')
			case word == "true" || word == "false" || word == "null":
				out = append(out, word...)
			case word == "e" || word == "E": // an exponent: 1e-5
				out = append(out, word...)
			default:
				return nil, fmt.Errorf("unexpected %q", word)
			}
			i = j - 1
		case c == '!' && i+1 < len(b) && (b[i+1] == '0' || b[i+1] == '1'): // minified booleans
			out = append(out, map[byte]string{'0': "true", '1': "false"}[b[i+1]]...)
			i++
		default:
			out = append(out, c)
		}
		if depth == 0 && len(out) > 0 {
			return nil, fmt.Errorf("not an array or object")
		}
	}
	return nil, fmt.Errorf("unterminated literal")
}
