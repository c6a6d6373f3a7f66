package app

import "testing"

// The --grpc-* limits refuse values out of range, naming flag or variable,
// value and what is accepted.
func TestCheckServeArgsTransport(t *testing.T) {
	base := []string{"--config", "rules"}
	checkServeArgsCases(t, []serveArgsCase{
		{"defaults", base, nil, ""},
		{"all set", append(base, "--grpc-max-concurrent-streams", "1", "--grpc-max-connections", "1048576", "--grpc-receive-timeout", "1ms", "--grpc-max-incomplete-requests", "1",
			"--grpc-max-recv-msg-size", "4096", "--grpc-max-connection-idle", "0", "--grpc-max-connection-age", "0", "--grpc-max-connection-age-grace", "0",
			"--grpc-keepalive-time", "1s", "--grpc-keepalive-timeout", "1s", "--grpc-keepalive-min-time", "0", "--grpc-keepalive-permit-without-stream=false"), nil, ""},
		{"streams zero", append(base, "--grpc-max-concurrent-streams", "0"), nil, `--grpc-max-concurrent-streams="0": must be an integer between 1 and 4294967295`},
		{"streams above uint32", base, map[string]string{"ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS": "4294967296"}, `ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS="4294967296": must be an integer between 1 and 4294967295`},
		{"connections zero", append(base, "--grpc-max-connections", "0"), nil, `--grpc-max-connections="0": must be an integer between 1 and 1048576`},
		{"connections not a number", append(base, "--grpc-max-connections", "many"), nil, `--grpc-max-connections="many": must be an integer`},
		{"receive timeout zero", base, map[string]string{"ENVOY_RLS_GRPC_RECEIVE_TIMEOUT": "0s"}, `ENVOY_RLS_GRPC_RECEIVE_TIMEOUT="0s": must be a positive duration such as 5s`},
		{"incomplete requests zero", append(base, "--grpc-max-incomplete-requests", "0"), nil, `--grpc-max-incomplete-requests="0": must be an integer between 1 and 1048576`},
		{"message size too small", append(base, "--grpc-max-recv-msg-size", "100"), nil, `--grpc-max-recv-msg-size="100": must be a size in bytes between 4096 and 2147483647`},
		{"idle negative", append(base, "--grpc-max-connection-idle", "-1s"), nil, `--grpc-max-connection-idle="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"age negative", append(base, "--grpc-max-connection-age", "-1s"), nil, `--grpc-max-connection-age="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"grace negative", append(base, "--grpc-max-connection-age-grace", "-1s"), nil, `--grpc-max-connection-age-grace="-1s": must be 0 or a positive duration such as 30s`},
		{"keepalive time below 1s", append(base, "--grpc-keepalive-time", "500ms"), nil, `--grpc-keepalive-time="500ms": must be a duration of at least 1s`},
		{"keepalive timeout below 1s", append(base, "--grpc-keepalive-timeout", "0s"), nil, `--grpc-keepalive-timeout="0s": must be a duration of at least 1s`},
		{"keepalive min time negative", append(base, "--grpc-keepalive-min-time", "-5s"), nil, `--grpc-keepalive-min-time="-5s": must be 0 or a positive duration such as 5s`},
		{"permit without stream", append(base, "--grpc-keepalive-permit-without-stream=maybe"), nil, `--grpc-keepalive-permit-without-stream="maybe": must be true or false`},
	})
}
