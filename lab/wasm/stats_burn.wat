;; A proxy-wasm (ABI 0.2.1) HTTP filter shaped like Istio's stats filter, for the lab's wasm-stats scenario.
;; Plugin configuration: two decimal numbers "REQ_US LOG_US": CPU to burn (an arithmetic loop whose speed is
;; re-measured after every call) in proxy_on_request_headers and in proxy_on_log. It logs one line per callback
;; (`wasm log stats_inbound ...`), reads the clock only on entry and exit, and reports what it measured itself:
;;   - filter state wasm.burn_req_ns: ns spent in proxy_on_request_headers for this request (access log);
;;   - counters wasmcustom.lab_self_ns (ns in request_headers + log) and wasmcustom.lab_calls (admin /stats).
(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_current_time_nanoseconds" (func $now_into (param i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $get_buffer (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_property" (func $set_property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_define_metric" (func $define_metric (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $increment_metric (param i32 i64) (result i32)))
  (memory (export "memory") 2)
  ;; 0..1023: scratch; 1024..: strings; 4096..: bump heap for the host's allocations
  (data (i32.const 1024) "request headers: stats recorded")        ;; 31 bytes
  (data (i32.const 1088) "log: stats flushed")                     ;; 18 bytes
  (data (i32.const 1152) "burn_req_ns")                            ;; 11 bytes
  (data (i32.const 1216) "lab_self_ns")                            ;; 11 bytes
  (data (i32.const 1280) "lab_calls")                              ;; 9 bytes
  (global $heap (mut i32) (i32.const 4096))
  (global $req_ns (mut i64) (i64.const 0))
  (global $log_ns (mut i64) (i64.const 0))
  (global $self_metric (mut i32) (i32.const 0))
  (global $calls_metric (mut i32) (i32.const 0))

  (func (export "proxy_abi_version_0_2_1"))

  (func (export "proxy_on_memory_allocate") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.and (i32.add (i32.add (global.get $heap) (local.get $size)) (i32.const 15))
                               (i32.const -16)))
    ;; a small fixed arena: wrap around (the host copies out before the next allocation matters)
    (if (i32.gt_u (global.get $heap) (i32.const 120000))
      (then (global.set $heap (i32.const 4096))
            (local.set $p (i32.const 4096))
            (global.set $heap (i32.and (i32.add (i32.add (i32.const 4096) (local.get $size)) (i32.const 15))
                                       (i32.const -16)))))
    (local.get $p))

  (func $now (result i64)
    (drop (call $now_into (i32.const 0)))
    (i64.load (i32.const 0)))

  ;; spins $iters times on arithmetic the engine cannot skip
  (func $spin (param $iters i64) (result i64)
    (local $x i64)
    (local.set $x (i64.const 88172645463325252))
    (block $done
      (loop $l
        (br_if $done (i64.eqz (local.get $iters)))
        (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 13))))
        (local.set $x (i64.xor (local.get $x) (i64.shr_u (local.get $x) (i64.const 7))))
        (local.set $x (i64.xor (local.get $x) (i64.shl (local.get $x) (i64.const 17))))
        (local.set $iters (i64.sub (local.get $iters) (i64.const 1)))
        (br $l)))
    (local.get $x))

  ;; iterations per microsecond, measured once at configure time over ~20 ms
  (global $per_us (mut i64) (i64.const 100))
  (func $calibrate
    (local $t0 i64) (local $dt i64)
    (local.set $t0 (call $now))
    (global.set $sink (call $spin (i64.const 20000000)))
    (local.set $dt (i64.sub (call $now) (local.get $t0)))
    (if (i64.gt_u (local.get $dt) (i64.const 1000))
      (then (global.set $per_us (i64.div_u (i64.const 20000000000) (local.get $dt))))))
  (global $sink (mut i64) (i64.const 0))
  ;; burns about $ns of CPU starting at $t0; the engine speeds up as V8 tiers up, so the rate is re-measured
  ;; after every burn (only two clock reads per callback: the host logs each one at trace level)
  (func $burn (param $ns i64) (param $t0 i64) (result i64)
    (local $iters i64) (local $spent i64)
    (local.set $iters (i64.div_u (i64.mul (local.get $ns) (global.get $per_us)) (i64.const 1000)))
    (global.set $sink (call $spin (local.get $iters)))
    (local.set $spent (i64.sub (call $now) (local.get $t0)))
    (if (i32.and (i64.gt_u (local.get $iters) (i64.const 0)) (i64.gt_u (local.get $spent) (i64.const 1000)))
      (then (global.set $per_us (i64.div_u (i64.mul (local.get $iters) (i64.const 1000)) (local.get $spent)))))
    (local.get $spent))

  ;; decimal text of $v at 512.., returns its length
  (func $itoa (param $v i64) (result i32)
    (local $n i32) (local $i i32) (local $tmp i64)
    (if (i64.eqz (local.get $v)) (then (i32.store8 (i32.const 512) (i32.const 48)) (return (i32.const 1))))
    (local.set $tmp (local.get $v))
    (block $d (loop $count
      (br_if $d (i64.eqz (local.get $tmp)))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (local.set $tmp (i64.div_u (local.get $tmp) (i64.const 10)))
      (br $count)))
    (local.set $i (local.get $n))
    (local.set $tmp (local.get $v))
    (block $w (loop $write
      (br_if $w (i32.eqz (local.get $i)))
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (i32.add (i32.const 512) (local.get $i))
                  (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $tmp) (i64.const 10)))))
      (local.set $tmp (i64.div_u (local.get $tmp) (i64.const 10)))
      (br $write)))
    (local.get $n))

  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))

  ;; reads "REQ_US LOG_US" from the plugin configuration
  (func (export "proxy_on_configure") (param $root i32) (param $size i32) (result i32)
    (local $p i32) (local $end i32) (local $c i32) (local $acc i64) (local $which i32)
    (if (i32.eqz (local.get $size)) (then (return (i32.const 1))))
    (drop (call $get_buffer (i32.const 7) (i32.const 0) (local.get $size) (i32.const 16) (i32.const 20)))
    (local.set $p (i32.load (i32.const 16)))
    (local.set $end (i32.add (local.get $p) (i32.load (i32.const 20))))
    (block $out (loop $scan
      (if (i32.ge_u (local.get $p) (local.get $end))
        (then (if (i32.eqz (local.get $which)) (then (global.set $req_ns (i64.mul (local.get $acc) (i64.const 1000))))
                                              (else (global.set $log_ns (i64.mul (local.get $acc) (i64.const 1000)))))
              (br $out)))
      (local.set $c (i32.load8_u (local.get $p)))
      (if (i32.and (i32.ge_u (local.get $c) (i32.const 48)) (i32.le_u (local.get $c) (i32.const 57)))
        (then (local.set $acc (i64.add (i64.mul (local.get $acc) (i64.const 10))
                                       (i64.extend_i32_u (i32.sub (local.get $c) (i32.const 48))))))
        (else (if (i32.eqz (local.get $which))
                (then (global.set $req_ns (i64.mul (local.get $acc) (i64.const 1000)))
                      (local.set $acc (i64.const 0))
                      (local.set $which (i32.const 1))))))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (br $scan)))
    (call $calibrate)
    (drop (call $define_metric (i32.const 0) (i32.const 1216) (i32.const 11) (i32.const 24)))
    (global.set $self_metric (i32.load (i32.const 24)))
    (drop (call $define_metric (i32.const 0) (i32.const 1280) (i32.const 9) (i32.const 24)))
    (global.set $calls_metric (i32.load (i32.const 24)))
    (i32.const 1))

  (func (export "proxy_on_request_headers") (param $ctx i32) (param $n i32) (param $eos i32) (result i32)
    (local $t0 i64) (local $spent i64) (local $len i32)
    (local.set $t0 (call $now))
    (drop (call $log (i32.const 1) (i32.const 1024) (i32.const 31)))
    (local.set $spent (call $burn (global.get $req_ns) (local.get $t0)))
    (local.set $len (call $itoa (local.get $spent)))
    (drop (call $set_property (i32.const 1152) (i32.const 11) (i32.const 512) (local.get $len)))
    (drop (call $increment_metric (global.get $self_metric) (local.get $spent)))
    (drop (call $increment_metric (global.get $calls_metric) (i64.const 1)))
    (i32.const 0))

  (func (export "proxy_on_response_headers") (param i32 i32 i32) (result i32) (i32.const 0))

  (func (export "proxy_on_log") (param $ctx i32)
    (local $t0 i64)
    (local.set $t0 (call $now))
    (drop (call $log (i32.const 1) (i32.const 1088) (i32.const 18)))
    (drop (call $increment_metric (global.get $self_metric) (call $burn (global.get $log_ns) (local.get $t0))))
    (drop (call $increment_metric (global.get $calls_metric) (i64.const 1))))

  (func (export "proxy_on_done") (param i32) (result i32) (i32.const 1))
  (func (export "proxy_on_delete") (param i32)))
