package app

import (
	"errors"
	"fmt"
)

// refusals collects one start-up error per refused value, naming the flag
// or variable as given and what it accepts (accepts: flag name → the text
// after "must be").
type refusals struct {
	given   map[string]given
	accepts map[string]string
	errs    []error
}

// check records the refusal of name's value unless ok.
func (r *refusals) check(name string, ok bool) {
	if !ok {
		r.errs = append(r.errs, fmt.Errorf("%s: must be %s", label(name, r.given), r.accepts[name]))
	}
}

// err joins the refusals, nil when there are none.
func (r *refusals) err() error {
	return errors.Join(r.errs...)
}
