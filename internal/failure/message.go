package failure

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// Message returns err's text for people: the text of each error of the
// standard library in its chain that shows Go's insides (the operation
// of an *fs.PathError, the function of a *strconv.NumError, the Go type of
// a *json.UnmarshalTypeError, a system call's name) is replaced by a plain
// sentence saying the same. The rest of the text is kept as it is.
func Message(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	// Each text once, every place it appears (errors.Join of tensors
	// that failed alike repeats it): the plain sentence often ends with
	// the text it replaces, which a second replacement would find again.
	done := map[string]bool{}
	walk(err, func(e error) {
		if plain, ok := plainText(e); ok && !done[e.Error()] {
			done[e.Error()] = true
			msg = strings.ReplaceAll(msg, e.Error(), plain)
		}
	})
	// The same texts where a wrapper formatted them with %v, out of the
	// chain.
	msg = numText.ReplaceAllStringFunc(msg, func(m string) string {
		s := numText.FindStringSubmatch(m)
		if s[2] == "value out of range" {
			return fmt.Sprintf("%s is out of range", s[1])
		}
		return fmt.Sprintf("%s is not a number", s[1])
	})
	return jsonTypeText.ReplaceAllStringFunc(msg, func(m string) string {
		s := jsonTypeText.FindStringSubmatch(m)
		where := ""
		if s[2] != "" {
			// Go names the field after its struct type: Index.sources.
			_, field, _ := strings.Cut(s[2], ".")
			where = fmt.Sprintf("field %q ", field)
		}
		return fmt.Sprintf("%sholds %s where %s belongs", where, article(s[1]), goTypeKind(s[3]))
	})
}

// numText and jsonTypeText match the texts of *strconv.NumError and
// *json.UnmarshalTypeError.
var (
	numText      = regexp.MustCompile(`strconv\.\w+: parsing ("(?:[^"\\]|\\.)*"): (invalid syntax|value out of range)`)
	jsonTypeText = regexp.MustCompile(`json: cannot unmarshal (\w+(?: \S+)?) into Go (?:struct field (\S+)|value) of type (\S+)`)
)

// goTypeKind names what a Go type, by its name, holds in JSON words.
func goTypeKind(name string) string {
	switch {
	case strings.HasPrefix(name, "[]"), strings.HasPrefix(name, "["):
		return "a list"
	case strings.HasPrefix(name, "map["):
		return "an object"
	case strings.HasPrefix(name, "int"):
		return "a whole number"
	case strings.HasPrefix(name, "uint"):
		bits := map[string]int{"uint8": 8, "uint16": 16, "uint32": 32}[name]
		if bits == 0 {
			bits = 64
		}
		return unsignedWords(bits)
	case strings.HasPrefix(name, "float"):
		return "a number"
	case name == "string":
		return "a string"
	case name == "bool":
		return "true or false"
	}
	return "an object"
}

// plainText returns the plain sentence for one error of the standard
// library whose text shows Go's insides, and false for any other error.
func plainText(e error) (string, bool) {
	switch e := e.(type) {
	case *fs.PathError:
		return pathText(e.Op, e.Path, Message(e.Err)), true
	case *os.LinkError:
		verb := "link"
		if e.Op == "rename" {
			verb = "rename"
		}
		return fmt.Sprintf("cannot %s %s to %s: %s", verb, e.Old, e.New, Message(e.Err)), true
	case *os.SyscallError:
		if e.Syscall == "mmap" {
			return "cannot map the file into memory: " + Message(e.Err), true
		}
		return Message(e.Err), true
	case *strconv.NumError:
		if errors.Is(e.Err, strconv.ErrRange) {
			return fmt.Sprintf("%q is out of range", e.Num), true
		}
		return fmt.Sprintf("%q is not a number", e.Num), true
	case *json.UnmarshalTypeError:
		where := ""
		if e.Field != "" {
			where = fmt.Sprintf("field %q ", e.Field)
		}
		return fmt.Sprintf("%sholds %s where %s belongs", where, article(e.Value), jsonKind(e.Type)), true
	}
	return "", false
}

// pathText says what failed on a path, naming the operation in words
// where it was a change to the file system and leaving it out where it
// was a read (the path and the reason say enough).
func pathText(op, path, reason string) string {
	verb := map[string]string{
		"write": "write", "create": "create", "mkdir": "create the folder", "mkdirat": "create the folder",
		"remove": "remove", "unlinkat": "remove", "truncate": "truncate", "sync": "flush", "fsync": "flush",
		"chmod": "change the permissions of", "chtimes": "set the times of", "close": "close",
	}[op]
	if verb == "" {
		return fmt.Sprintf("%s: %s", path, reason)
	}
	return fmt.Sprintf("cannot %s %s: %s", verb, path, reason)
}

// article names a JSON value kind as Go's decoder reports it ("string",
// "number -1", "bool", "array", "object") with an article.
func article(v string) string {
	v, _, _ = strings.Cut(v, " ")
	switch v {
	case "array", "object":
		return "an " + v
	case "bool":
		return "true or false"
	}
	return "a " + v
}

// unsignedWords names an unsigned integer of bits bits in JSON words: its
// range, not just its sign, since 2^64 does not fit either (trial 70).
func unsignedWords(bits int) string {
	return "a whole number from 0 to " + strconv.FormatUint(1<<bits-1, 10)
}

// jsonKind names what a Go type holds in JSON words.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return unsignedWords(t.Bits())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// Locate returns the file and the tensor err is about, where an error in
// its chain names them (the outermost that does): a
// *pipeline.TensorError, a *safetensors.FormatError, a *transport.Error,
// or for the file alone an *fs.PathError or *os.LinkError; but a file
// that could not be written is the file, wherever it lies in the chain.
func Locate(err error) (file, tensor string) {
	// A failure to write a file is about that file, whatever the input
	// being read then (compress's errors name their source shard).
	walk(err, func(e error) {
		if pe, ok := e.(*fs.PathError); ok && file == "" && writing(pe) {
			file = pe.Path
		}
	})
	walk(err, func(e error) {
		f, t := "", ""
		switch e := e.(type) {
		case *pipeline.TensorError:
			f, t = e.File, e.Tensor
		case *shardcache.TensorError:
			f, t = e.File, e.Tensor
		case *shardcache.FileError:
			f = e.File
		case *safetensors.FormatError:
			f, t = e.File, e.Tensor
		case *transport.Error:
			t = e.Tensor
		case *vmm.DuplicateError:
			f, t = e.Second, e.Name
		case *fs.PathError:
			f = e.Path
		case *os.LinkError:
			f = e.Old
		}
		if file == "" {
			file = f
		}
		if tensor == "" {
			tensor = t
		}
	})
	if file == "" {
		// Most errors start with the path they are about ("dir: not a
		// splitzip cache"), or wrap one that does (`tensor "w":
		// objects/ab/ab…: cache object is corrupt`): the outermost such
		// path is taken.
		walk(err, func(e error) {
			if file == "" {
				file = leadingPath(e.Error())
			}
		})
	}
	return file, tensor
}

// leadingPath returns the path msg starts with ("path: ..." or "path
// (note): ..."), where that names an existing file, or a path with a
// folder in it that exists (a file found missing), less a pack member's
// range ("pack[0:+16]"); not a bare lower-case word, as packages start
// their errors ("codec:").
func leadingPath(msg string) string {
	p, _, ok := strings.Cut(msg, ": ")
	p, _, _ = strings.Cut(p, " (") // "path (payload KEY): ..."
	if !ok || p == "" || strings.ContainsAny(p, " \t\n\"") || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz") == "" {
		return ""
	}
	if i := strings.LastIndexByte(p, '['); i > 0 && strings.HasSuffix(p, "]") && strings.Contains(p[i:], ":+") {
		p = p[:i]
	}
	if _, err := os.Lstat(p); err == nil {
		return p
	}
	if st, err := os.Stat(filepath.Dir(p)); err == nil && st.IsDir() && strings.Contains(p, string(filepath.Separator)) {
		return p
	}
	return ""
}

// walk calls fn on err and every error it wraps, outermost first, depth
// first through errors that wrap several.
func walk(err error, fn func(error)) {
	for err != nil {
		fn(err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, fn)
			}
			return
		default:
			return
		}
	}
}
