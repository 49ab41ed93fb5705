package failure

import (
	"errors"
	"fmt"
)

// Kind is the class of a failure; each has one exit code.
type Kind uint8

// Kinds, in the order of the table of the package doc. OK is the kind of a
// nil error.
const (
	OK Kind = iota
	Usage
	Input
	Integrity
	Resource
	Device
	Internal
	Interrupted
)

// Kinds lists every kind of failure (not OK), in the order of the table
// in the package doc, for the tables of help texts and their tests.
var Kinds = []Kind{Usage, Input, Integrity, Resource, Device, Internal, Interrupted}

// kindInfo holds a kind's name, exit code and one-line description.
var kindInfo = [...]struct {
	name string
	code int
	what string
}{
	OK:          {"ok", 0, "success"},
	Usage:       {"usage", 2, "the command line is wrong (a flag, a value, an argument, an output that already exists)"},
	Input:       {"input", 3, "an input is missing, unreadable, not what was expected, or changed since it was compressed"},
	Integrity:   {"integrity", 1, "stored data is wrong: a corrupt cache or payload, a checksum or verify mismatch"},
	Resource:    {"resource", 4, "disk full, quota, an unwritable output, memory, a cache locked by another command (or, for gc, open in a reader), or a network or registry that fails or throttles after retries"},
	Device:      {"device", 5, "no GPU or driver, or a CUDA call failed"},
	Internal:    {"internal", 70, "a bug in splitzip (please report it)"},
	Interrupted: {"interrupted", 130, "Ctrl-C or SIGTERM ended the run"},
}

// String returns the kind's name: "usage", "input", "integrity",
// "resource", "device", "internal" or "interrupted" ("ok" for OK).
func (k Kind) String() string {
	if int(k) < len(kindInfo) {
		return kindInfo[k].name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ExitCode returns the process exit code of a command that fails with an
// error of this kind (0 for OK).
func (k Kind) ExitCode() int {
	if int(k) < len(kindInfo) {
		return kindInfo[k].code
	}
	return kindInfo[Internal].code
}

// Description says in one line what failures of this kind are.
func (k Kind) Description() string {
	if int(k) < len(kindInfo) {
		return kindInfo[k].what
	}
	return ""
}

// Kinder is implemented by errors that know their own kind; KindOf asks
// the outermost one in a chain.
type Kinder interface {
	FailureKind() Kind
}

// Error is an error marked with its kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the marked error.
func (e *Error) Unwrap() error { return e.Err }

// FailureKind returns the kind err was marked with.
func (e *Error) FailureKind() Kind { return e.Kind }

// Mark returns err marked as a failure of kind k (nil for a nil err). The
// text and the chain of err are kept, so errors.Is still finds its
// sentinels.
func Mark(k Kind, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: k, Err: err}
}

// Usagef returns a usage error with a message formatted as fmt.Errorf
// does (%w wraps).
func Usagef(format string, args ...any) error {
	return &Error{Kind: Usage, Err: fmt.Errorf(format, args...)}
}

// KindOf classifies err: the kind an error in its chain states (the
// outermost first), else the kind of the first sentinel or typed error of
// the tables of classify.go it matches, else Internal. KindOf(nil) is OK.
func KindOf(err error) Kind {
	if err == nil {
		return OK
	}
	var k Kinder
	if errors.As(err, &k) {
		return k.FailureKind()
	}
	return classify(err)
}

// ExitCode is KindOf(err).ExitCode().
func ExitCode(err error) int { return KindOf(err).ExitCode() }
