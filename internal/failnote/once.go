package failnote

import (
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Once is err with a text that names each cause once; errors.Is and
// errors.As see err's chain as before. Nil stays nil.
//
// A workflow that fails with fmt.Errorf("round %d batch: %w", err), err an
// activity's error, is stored as a failure whose message is its whole text
// and whose cause is err again; the SDK's Error() on the client prints
// the message and then the cause, so every layer that wraps says the
// activity's sentence once more (a refusal wrapped by the activity and
// then by the workflow read 4 times). Text keeps each layer's own words
// only where the layers above have not said them.
func Once(err error) error {
	if err == nil {
		return nil
	}
	return once{err}
}

type once struct{ err error }

func (o once) Error() string { return Text(o.err) }
func (o once) Unwrap() error { return o.err }

// Text is err.Error() with each cause said once. Down err's chain
// (errors.Unwrap), a layer whose text is "<own>: <its cause's text>"
// contributes <own> unless what the layers above said already contains it
// (for an application error, its message; one made from a plain Go error
// contributes only its message). A layer with several causes (errors.Join)
// or whose text does not end in its cause's is said whole and ends the walk.
func Text(err error) string {
	var parts []string
	said := ""
	for err != nil {
		full := err.Error()
		cause := singleUnwrap(err)
		own := full
		if cause != nil {
			var ok bool
			if own, ok = strings.CutSuffix(full, ": "+cause.Error()); !ok {
				own, cause = full, nil
			}
		}
		key := own
		if app, ok := err.(*temporal.ApplicationError); ok {
			key = app.Message() // without the SDK's "(type: …)"
			if goErrorTypes[app.Type()] {
				own = key // a Go error's type says nothing to a person
			}
		}
		if !strings.Contains(said, key) {
			parts = append(parts, own)
			said = strings.Join(parts, ": ")
		}
		err = cause
	}
	return said
}

// goErrorTypes are the types the SDK gives a failure made from a plain Go
// error of the standard library (fmt.Errorf, errors.New).
var goErrorTypes = map[string]bool{"": true, "wrapError": true, "wrapErrors": true, "joinError": true, "errorString": true}

// singleUnwrap is err's one cause: errors.Join and other multi-errors
// end the walk.
func singleUnwrap(err error) error {
	u, ok := err.(interface{ Unwrap() error })
	if !ok {
		return nil
	}
	return u.Unwrap()
}
