package tool

import "errors"

// Readable reports whether the session's sandbox lets its tools read abs
// (path is how the caller named it, for the message): a face that reads
// a workspace file on a client's behalf (a message's attached files)
// applies the same rule as the read tool, so a client gets no more than
// the model could.
func (e Env) Readable(abs, path string) error {
	if r := e.checkReadable(abs, path); r != nil {
		var msg string
		for _, c := range r.Content {
			msg += c.Text
		}
		return errors.New(msg)
	}
	return nil
}
