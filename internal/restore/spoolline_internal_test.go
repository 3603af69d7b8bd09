package restore

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestReadSpoolLine: a line spoolLine wrote reads back as json.Unmarshal reads it, without
// scanning the object again; a line of another shape is left to json.Unmarshal.
func TestReadSpoolLine(t *testing.T) {
	for _, tt := range []struct{ namespace, name, object string }{
		{"shop", "settings", `{"apiVersion":"v1","kind":"ConfigMap","data":{"k":"}}"}}`},
		{"", "pv-1", `{}`},
		{`we"ird`, `back\slash`, `{"a":"\n\"}"}`},
		{"shop", "ünïcode<&>", `{"a":[1,2,{"b":null}]}`},
	} {
		line := append(spoolLine(tt.namespace, tt.name, []byte(tt.object)), '\n')
		got, ok := readSpoolLine(line)
		var want SpooledItem
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatal(err)
		}
		if !ok || !reflect.DeepEqual(got, want) || string(got.Object) != tt.object {
			t.Errorf("readSpoolLine(%s) = %+v, %v; want %+v", line, got, ok, want)
		}
	}
	for _, line := range []string{
		``, `{}`, `{"name":"a","namespace":"b","object":{}}`, `{"namespace":"a","name":"b","object":[]}`,
		`{"namespace":"a","name":"b","object":{}`, `{"namespace":"a,"name":"b","object":{}}`, `{"namespace":1,"name":"b","object":{}}`,
	} {
		if got, ok := readSpoolLine([]byte(line)); ok {
			t.Errorf("readSpoolLine(%s) = %+v, want it left to json.Unmarshal", line, got)
		}
	}
}
