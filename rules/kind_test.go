package rules

import "errors"

// errSyntax and errInvalid name the two kinds of *Error (Error.Syntax) in
// test tables.
var (
	errSyntax  = errors.New("syntax error")
	errInvalid = errors.New("invalid rule")
)

// kindOf returns errSyntax or errInvalid for the first *Error in err, or
// nil when there is none.
func kindOf(err error) error {
	var e *Error
	switch {
	case !errors.As(err, &e):
		return nil
	case e.Syntax:
		return errSyntax
	}
	return errInvalid
}
