package report_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/isched/isched/internal/report"
)

func Example() {
	e := report.NewEnvelope(report.KindResult, time.UnixMilli(1_700_000_000_000))
	e.Result = &report.Result{ActionID: "lab:4242:requeue:1", Status: report.StatusOK, Message: "requeued", DoneMS: e.TimeMS}
	b, err := report.Encode(e)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))

	got, err := report.Decode(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	switch got.Kind {
	case report.KindResult:
		fmt.Println(got.Result.ActionID, got.Result.Status)
	}

	_, err = report.Decode([]byte(`{"v":1,"kind":"result","ts_ms":1,"result":{"action_id":"x","status":"ok","message":"","done_ms":-1}}`))
	var fe *report.FieldError
	fmt.Println(errors.As(err, &fe), fe.Field, errors.Is(err, report.ErrInvalid))
	fmt.Println(err)
	// Output:
	// {"v":1,"kind":"result","ts_ms":1700000000000,"result":{"action_id":"lab:4242:requeue:1","status":"ok","message":"requeued","done_ms":1700000000000}}
	// lab:4242:requeue:1 ok
	// true result.done_ms true
	// report: field "result.done_ms": must be a positive Unix time in milliseconds (got -1)
}
