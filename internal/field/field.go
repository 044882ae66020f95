// Package field is the error a library returns for bad input in one field
// of its configuration. Libraries name their own fields; the command line
// alone knows which flag sets each field, and says so in one table per
// command.
package field

import (
	"fmt"
	"regexp"
)

// Error is bad input in one field. Reason reads after the field's name
// ("must be at least 1 (got 0)"), and may name other fields in braces
// ("needs {ConsumerHeader}": a capital first, as Go field names have), which
// Render replaces too; lower-case words in braces are left as they are.
type Error struct {
	Field  string
	Reason string
}

// Errorf returns an Error for field with a formatted reason.
func Errorf(field, format string, a ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, a...)}
}

func (e *Error) Error() string { return e.Render(func(f string) string { return f }) }

var braces = regexp.MustCompile(`\{([A-Z][A-Za-z0-9.]*)\}`)

// Render writes the error with every field named by name: its own at the
// front, and those in braces in the reason.
func (e *Error) Render(name func(field string) string) string {
	reason := braces.ReplaceAllStringFunc(e.Reason, func(m string) string { return name(m[1 : len(m)-1]) })
	if reason == "" {
		return name(e.Field)
	}
	if reason[0] == ':' {
		return name(e.Field) + reason
	}
	return name(e.Field) + " " + reason
}

// Within returns err, when it is an *Error of a field of the struct in
// field parent, as an Error of parent.Field (Bounds.Length), so that a
// command can name the flag of a nested field; any other error as it is.
func Within(parent string, err error) error {
	fe, ok := err.(*Error)
	if !ok {
		return err
	}
	return &Error{Field: parent + "." + fe.Field, Reason: fe.Reason}
}
