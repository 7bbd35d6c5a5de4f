/*
 * The message language of Envoy / istio-proxy trace logs.
 *
 * Input: one log record reduced to  LOGGER '\t' FIRST_LINE_OF_MESSAGE
 * (the envelope - time, level, thread, source - is split off before; header
 * dumps that follow the first line are read separately).
 *
 * Every rule under `lifecycle` and `noise` is an event kind: its name in
 * snake_case is the value of the `kind` column, and its labels are the typed
 * field columns (see parser/fields.py for their types). Anything no rule
 * recognises is `unknownMessage` (kind `unknown`): counted, kept, never dropped.
 *
 * Templates come from ../shared/docs/envoy-log-catalog.md (Envoy 1.19 .. 1.40).
 * Literal phrases are lexer tokens; the lexer's longest match makes a phrase
 * win over the generic WORD token, so free text still lexes.
 */
grammar EnvoyLog;

line
    : logger? TAB prefix? known EOF
    | quietLogger TAB prefix? anything EOF
    | logger? TAB prefix? unknownMessage EOF
    ;

logger : ~TAB+ ;

// Loggers that never carry a request's lifecycle: their lines are background noise.
quietLogger
    : 'admin' | 'aws' | 'config' | 'dns' | 'file' | 'grpc' | 'hc' | 'health_checker' | 'init'
    | 'runtime' | 'secret' | 'stats' | 'testing' | 'tracing' | 'upstream' | 'xds' | 'rbac'
    | 'jwt' | 'ext_authz' | 'kafka' | 'dubbo' | 'thrift' | 'redis' | 'mongo' | 'quic'
    | 'happy_eyeballs' | 'multi_connection' | 'assert' | 'backtrace' | 'envoy_bug' | 'misc'
    | 'overload' | 'udp' | 'filter' | 'lua' | 'golang' | 'ext_proc' | 'dynamic_modules' | 'quic_stream'
    ;

prefix
    : '[C' conn_id=INT (']' '[S' stream_id=INT)? '] '
    | '[Tags: "ConnectionId":"' conn_id=INT '"' (',"StreamId":"' stream_id=INT '"')? '] '
    | '[Tags: \\"ConnectionId\\":\\"' conn_id=INT '\\"' (',\\"StreamId\\":\\"' stream_id=INT '\\"')? '] '
    ;

known : lifecycle | noise ;

lifecycle
    // network::ConnectionImpl and transport sockets (logger `connection`)
    : socketEvent | readReady | writeReady | writingBytes | writeFlushComplete | readDisable
    | raisingConnectionEvent | remoteClose | remoteEarlyClose | closingConnection | closingSocket
    | connectingTo | connectionInProgress | connected | connectError | currentConnectingState
    | readReturns | readError | writeReturns | writeError
    | sslReadReturns | sslReadBytes | sslWriteReturns | sslErrorWhileRead | sslErrorWhileWrite
    | sslShutdown | tlsFailure | rstClose | tlsHandshakeStep | tlsHandshakeComplete
    // listener (logger `conn_handler`)
    | newConnection | connectionOnEvent | addingToCleanupList
    // HTTP/1 codec (logger `http`)
    | parsingBytes | parsedBytes | messageBegin | completedHeader | onHeadersComplete
    | serverOnHeadersComplete | clientOnHeadersComplete | statusCode | bodySize | messageComplete
    | directDispatchedBytes
    // HTTP/2 codec (logger `http2`)
    | h2DispatchingBytes | h2DispatchedBytes | h2AboutToRecvFrame | h2TrackInboundFrame | h2RecvFrame
    | h2VisitorFrameHeader | h2VisitorEndHeaders | h2VisitorBeginData | h2VisitorEndStream
    | h2AboutToSendFrame | h2SentFrame | h2SendData | h2StreamClosed | h2RemoteReset | h2SentReset
    | h2SentGoaway
    // connection manager and filter manager (logger `http`)
    | newStream | requestHeadersComplete | requestEndStream | requestTrailersComplete
    | encodingHeaders | encodingData | encodingTrailers | encoding1xxHeaders
    | streamReset | doEndStreamReset | codecCompletedEncoding | connectionCloseHeader | drainClosing
    | idleTimeout | maxRequestsPerConnection | dispatchError
    | decodeHeadersCalled | decodeDataCalled | decodeTrailersCalled
    | encodeHeadersCalled | encodeDataCalled | encodeTrailersCalled | encode1xxHeadersCalled
    | continuingFilterChain | filterIterationAborted | localReply | preparingLocalReply
    | executingLocalReply
    // the admin interface's own filter (logger `admin`)
    | adminRequestComplete
    // router, upstream request, upstream codec filter (logger `router`)
    | routeMatch | noRouteMatch | unknownCluster | routerDecodingHeaders | routerDecodingTrailers
    | upstreamHeadersComplete | upstream1xx | upstreamTimeout | upstreamReset | performingRetry
    | poolReady | attachedUpstreamConnection | upstreamResponseHeaders | upstreamResponseTrailers
    | perTryTimeout | cancelPoolRequest | proxyingHeaders | proxyingBytes | proxyingTrailers
    | bufferingBytes
    // connection pools (logger `pool`) and the codec client (logger `client`)
    | poolUsingExisting | poolCreatingStream | poolTryingNewConnection | poolCreatingConnection
    | poolQueueingStream | poolAttachingToNextStream | poolDestroyingStream
    | poolClientDisconnected | poolConnectTimeout | poolOverflow | poolCancellingStream
    | sawUpstreamClose | responseComplete | clientConnecting | clientDisconnect
    | clientRequestReset
    // dispatcher (logger `main`)
    | deferredDeleteAdded | deferredDeleteCleared
    // cluster manager, wasm, lua
    | noHealthyHost | wasmLog | celError | luaLog | wasmVmEnter | wasmVmExit
    // Envoy's own requests: active health checks (logger `hc`), async-client answers, ext_authz calls
    | healthCheckResult | healthCheckFailure | asyncResponseHeaders | extAuthzCalling
    ;

// ---- connection ----
socketEvent : 'socket event: ' events=INT ;
// `=1`/`=0` (1.19's bool bit-field, int 1.22+), `=true`/`=false` (other builds); plain `read ready` before 1.16
readReady : ('read ready. dispatch_buffered_data=' | 'read ready. dispatch buffered_data=') dispatch_buffered=(INT | WORD)
          | 'read ready' ;
writeReady : 'write ready' ;
writingBytes : 'writing ' bytes=INT ' bytes' (', end_stream ' end_stream=WORD)? ;
writeFlushComplete : 'write flush complete' ;
readDisable : 'readDisable: disable=' disable=WORD ' disable_count=' count=INT ' state=' state=INT ' buffer_length=' buffer_length=INT ;
raisingConnectionEvent : 'raising connection event ' event=INT ;
remoteClose : 'remote close' ;
remoteEarlyClose : 'remote early close' ;
closingConnection : 'closing data_to_write=' bytes=INT ' type=' close_type=INT ;
closingSocket : 'closing socket: ' close_type=INT ;
connectingTo : 'connecting to ' address=rest ;
connectionInProgress : 'connection in progress' ;
connected : 'connected' ;
connectError : ('delayed connect error: ' | 'immediate connect error: ' | 'delayed connection error: ' | 'immediate connection error: ') reason=rest ;
currentConnectingState : 'current connecting state: ' connecting=WORD ;
readReturns : 'read returns: ' bytes=signedInt ;
readError : 'read error: ' reason=rest ;
writeReturns : 'write returns: ' bytes=signedInt ;
writeError : 'write error: ' reason=rest ;
sslReadReturns : 'ssl read returns: ' bytes=signedInt ;
sslReadBytes : 'ssl read ' bytes=INT ' bytes' ;
sslWriteReturns : 'ssl write returns: ' bytes=signedInt ;
sslErrorWhileRead : 'ssl error occurred while read: ' reason=rest ;
sslErrorWhileWrite : 'ssl error occurred while write: ' reason=rest ;
sslShutdown : 'SSL shutdown: rc=' code=signedInt ;
tlsFailure : ('remote address:' | 'TLS error: ' | 'verify cert failed: ' | 'handshake error: ') reason=rest ;
// ssl_socket.cc up to 1.17 (debug): each non-final handshake step, then success; later versions log neither
// (1.24+ log the end of an asynchronous certificate validation / selection inside the handshake).
tlsHandshakeStep : 'handshake expecting ' ('read' | 'write') | 'Async cert validation completed' | 'Async cert selection completed' ;
tlsHandshakeComplete : 'handshake complete' ;
rstClose : ('read: rst close from peer' | 'write: rst close from peer.') ;

// ---- listener ----
newConnection : 'new connection from ' address=rest | 'new connection' ;  // the latter: logger `main`, <= 1.15
connectionOnEvent : ('[C' conn_id=INT '] connection on event ' | 'tcp connection on event ') event=INT ;
addingToCleanupList : 'adding to cleanup list' ;

// ---- HTTP/1 codec ----
parsingBytes : 'parsing ' bytes=INT ' bytes' ;
parsedBytes : 'parsed ' bytes=INT ' bytes' ;
messageBegin : 'message begin' ;
completedHeader : 'completed header: key=' header_key=headerKey ' value=' header_value=rest ;
onHeadersComplete : 'onHeadersCompleteBase' | 'onHeadersCompleteImpl' | 'headers complete' ;  // last: <= 1.13
serverOnHeadersComplete : 'Server: onHeadersComplete size=' count=INT ;
clientOnHeadersComplete : 'Client: onHeadersComplete size=' count=INT ;
statusCode : 'status_code ' status=INT ;
bodySize : 'body size=' bytes=INT ;
messageComplete : 'message complete' ;
directDispatchedBytes : 'direct-dispatched ' bytes=INT ' bytes' ;

// ---- HTTP/2 codec ----
h2DispatchingBytes : 'dispatching ' bytes=INT ' bytes' ;
h2DispatchedBytes : 'dispatched ' bytes=INT ' bytes' ;
h2AboutToRecvFrame : 'about to recv frame type=' frame_type=INT ', flags=' flags=INT (', stream_id=' h2_stream_id=INT)? ;  // no id: <= 1.15
h2TrackInboundFrame : 'track inbound frame type=' frame_type=INT ' flags=' flags=INT ' length=' bytes=INT ' padding_length=' INT ;
h2RecvFrame : 'recv frame type=' (frame_type=INT | frame_name=WORD) (' stream_id=' h2_stream_id=INT)? ;
h2VisitorFrameHeader : 'Http2Visitor::OnFrameHeader(' h2_stream_id=INT ', ' bytes=INT ', ' frame_type=INT ', ' flags=INT ')' ;
h2VisitorEndHeaders : 'Http2Visitor::OnEndHeadersForStream(' h2_stream_id=INT ')' ;
h2VisitorBeginData : 'Http2Visitor::OnBeginDataForStream(' h2_stream_id=INT ', ' bytes=INT ')' ;
h2VisitorEndStream : 'Http2Visitor::OnEndStream(' h2_stream_id=INT ')' ;
h2AboutToSendFrame : 'about to send frame type=' frame_type=INT ', flags=' flags=INT ;
h2SentFrame : 'sent frame type=' frame_type=INT (', stream_id=' h2_stream_id=INT ', length=' bytes=INT)? ;
h2SendData : 'send data: bytes=' bytes=INT ;
h2StreamClosed : 'stream closed: ' code=INT | 'stream ' h2_stream_id=INT ' closed: ' code=INT ;
h2RemoteReset : 'remote reset: ' h2_stream_id=INT (' ' code=INT)? ;
h2SentReset : 'sent reset code=' code=INT ;
h2SentGoaway : 'sent goaway code=' code=INT ;

// ---- connection manager (HCM) ----
newStream : 'new stream' ;
requestHeadersComplete : 'request headers complete (end_stream=' end_stream=WORD '):' ;
requestEndStream : 'request end stream' | 'request end stream timestamp recorded' ;
requestTrailersComplete : 'request trailers complete:' ;
encodingHeaders : 'encoding headers via codec (end_stream=' end_stream=WORD '):' ;
encodingData : 'encoding data via codec (size=' bytes=INT ' end_stream=' end_stream=WORD ')' ;
encodingTrailers : 'encoding trailers via codec:' ;
encoding1xxHeaders : 'encoding 100 continue headers via codec:' | 'encoding 1xx continue headers via codec:' ;
streamReset : 'stream reset' (': reset reason: ' reason=rest)? ;
doEndStreamReset : 'doEndStream() resetting stream' ;
codecCompletedEncoding : 'Codec completed encoding stream.' ;
connectionCloseHeader : 'closing connection due to connection close header' ;
drainClosing : 'drain closing connection' | 'disabling keepalive due to envoy overload' ;
idleTimeout : 'idle timeout' | 'max connection duration reached' | 'Stream max duration time reached' ;
maxRequestsPerConnection : 'max requests per connection reached' ;
dispatchError : 'dispatch error: ' reason=rest ;

// ---- filter manager ----
decodeHeadersCalled : 'decode headers called: filter=' filter=filterName ' status=' filter_status=INT ;
decodeDataCalled : 'decode data called: filter=' filter=filterName ' status=' filter_status=INT ;
decodeTrailersCalled : 'decode trailers called: filter=' filter=filterName ' status=' filter_status=INT ;
encodeHeadersCalled : 'encode headers called: filter=' filter=filterName ' status=' filter_status=INT ;
encodeDataCalled : 'encode data called: filter=' filter=filterName ' status=' filter_status=INT ;
encodeTrailersCalled : 'encode trailers called: filter=' filter=filterName ' status=' filter_status=INT ;
encode1xxHeadersCalled : ('encode 100 continue headers called: filter=' | 'encode 1xx continue headers called: filter=') filter=filterName ' status=' filter_status=INT ;
continuingFilterChain : ('continuing filter chain: filter=' | 'cannot continue filter chain: filter=') filter=filterName ;
filterIterationAborted : iteration=WORD ' filter iteration aborted due to local reply: filter=' filter=filterName ;
localReply : 'Sending local reply with details ' details=rest ;
preparingLocalReply : 'Preparing local reply with details ' details=rest ;
executingLocalReply : 'Executing sending local reply.' ;
adminRequestComplete : 'request complete: path: ' url=rest ;

// ---- router ----
routeMatch : 'cluster ' cluster=SQ ' match for URL ' url=SQ ;
noRouteMatch : ('no cluster match for URL ' | 'no route match for URL ') url=SQ ;
unknownCluster : 'unknown cluster ' cluster=SQ ;
routerDecodingHeaders : 'router decoding headers:' ;
routerDecodingTrailers : 'router decoding trailers:' ;
upstreamHeadersComplete : 'upstream headers complete: end_stream=' end_stream=WORD ;
upstream1xx : 'upstream 100 continue' | 'upstream 1xx (' status=INT ').' ' '? ;
upstreamTimeout : 'upstream timeout' ;
upstreamReset : ('upstream reset: reset reason: ' | 'upstream reset: reset reason ') reason=rest ;  // no colon: <= 1.13
performingRetry : 'performing retry' ;
poolReady : 'pool ready' ;
attachedUpstreamConnection : 'Attached upstream connection [C' upstream_conn_id=INT '] to downstream connection [C' conn_id=INT ']' ;
upstreamResponseHeaders : 'upstream response headers:' | 'end_stream: ' end_stream=WORD ', upstream response headers:' ;
upstreamResponseTrailers : 'upstream response trailers:' ;
perTryTimeout : 'upstream per try timeout' | 'upstream per try idle timeout' | 'ignored upstream per try timeout due to already started downstream response' ;
cancelPoolRequest : 'canceled pool request' | 'resetting pool request' ;
proxyingHeaders : 'proxying headers' ;
proxyingBytes : 'proxying ' bytes=INT ' bytes' ;
proxyingTrailers : 'proxying trailers' ;
bufferingBytes : 'buffering ' bytes=INT ' bytes' ;

// ---- connection pools and codec client ----
poolUsingExisting : 'using existing connection' | 'using existing fully connected connection' | 'using existing early data ready connection' ;
poolCreatingStream : 'creating stream' ;
poolTryingNewConnection : 'trying to create new connection' ;
poolCreatingConnection : 'creating a new connection' (' (connecting=' count=INT ')')? ;
// `request` wording: Envoy <= 1.15 (pools spoke of requests before streams)
poolQueueingStream : ('queueing stream due to no available connections' | 'queueing request due to no available connections')
                     (' (ready=' INT ' busy=' INT ' connecting=' count=INT ')')? ;
poolAttachingToNextStream : 'attaching to next stream' | 'attaching to next request' ;
poolDestroyingStream : 'destroying stream: ' count=INT (' remaining' | ' active remaining, readyForStream ' WORD ', currentUnusedCapacity ' INT) ;
poolClientDisconnected : 'client disconnected, failure reason: ' reason=rest | 'client disconnected, failure reason:' ;
poolConnectTimeout : 'connect timeout' ;
poolOverflow : 'max pending streams overflow' | 'max streams overflow' | 'max pending requests overflow' | 'max requests overflow' ;
poolCancellingStream : 'cancelling pending stream' | 'cancelling pending request' ;
sawUpstreamClose : 'saw upstream close connection' | 'response before request complete' ;
responseComplete : 'response complete' ;
clientConnecting : 'connecting' ;
clientDisconnect : 'disconnect. resetting ' count=INT ' pending requests' ;
clientRequestReset : 'request reset' | 'Request reset. Reason ' reason=rest ;

// ---- dispatcher ----
deferredDeleteAdded : 'item added to deferred deletion list (size=' count=INT ')' ;
deferredDeleteCleared : 'clearing deferred deletion list (size=' count=INT ')' ;

// ---- cluster manager, wasm, lua ----
noHealthyHost : 'no healthy host for HTTP connection pool' | 'no healthy host' ;
wasmLog : 'wasm log' text=rest ;
celError : ('expr_evaluate error: ' | 'expr_evaluate value error: ' | 'expr evaluate value error: ' | 'expr_create parse error: ' | 'expr_create compile error: ') reason=rest ;
luaLog : 'script log: ' text=rest ;
// Envoy's Wasm VM call tracing (wasm_vm.cc, trace level): the host entering a module callback and its return.
// The first argument of an HTTP context's callbacks is the module's context id.
wasmVmEnter : '[host->vm] ' wasm_call=WORD '(' (wasm_context=INT anything)? ')' ;
wasmVmExit : '[host<-vm] ' wasm_call=WORD ' return: ' rest ;

// ---- Envoy's own requests ----
// Active health checking (health_checker_impl.cc, logger `hc`; Envoy runs it on the main thread). One line per
// check on the checker's connection: the answer's status (`hc response=` before 1.22) and the host's flags.
healthCheckResult : ('hc response_code=' | 'hc response=') status=INT ' health_flags=' text=rest ;
healthCheckFailure : ('connection/stream error health_flags=' | 'connection/stream timeout health_flags=') text=rest ;
// The async client (tracing flushes, ext_authz http_service, Lua httpCall) received its answer's headers.
asyncResponseHeaders : 'async http request response headers (end_stream=' end_stream=WORD '):' ;
// The ext_authz filter starts its check of the request whose stream id the line carries.
extAuthzCalling : 'ext_authz filter calling authorization server' anything ;

// ---- recognised, not used by the analysis ----
noise
    : timerNoise | loadShedNoise | poolStateNoise | poolPreconnectNoise | codecClientNoise
    | h2SessionNoise | filterManagerNoise | connectionCloseNoise | routerCleanupNoise
    | dispatcherNoise | workerNoise | listenerNoise | watermarkNoise | flowControlNoise | serverLifecycleNoise
    | wasmHostCallNoise | asyncClientNoise
    ;
timerNoise : 'enableTimer called on ' anything ;
loadShedNoise : 'LoadShedPoint ' anything ;
poolStateNoise : 'ConnPoolImplBase ' anything | 'invoking ' anything | 'not creating a new connection' anything
               | 'closing idle client ' anything | 'draining ' anything | 'creating new preconnect connection'
               | 'maximum streams per connection, ' anything | 'max connection duration reached, ' anything
               | 'remote goaway' | 'moving to ready' | 'Decreasing stream capacity by ' anything | 'Increasing stream capacity by ' anything ;
poolPreconnectNoise : 'per-upstream shouldCreateNewConnection returns ' anything | 'predictive shouldCreateNewConnection returns ' anything ;
codecClientNoise : 'encode complete' | 'waiting for encode to complete' ;
h2SessionNoise : 'updating connection-level initial window size to ' anything | 'Recouping ' anything
               | 'Http2Visitor ' anything | 'Http2Visitor: ' anything | 'Codec does not have Metadata frame support.'
               | 'adding custom settings parameter with id ' anything | 'Sending keepalive PING ' anything
               | 'recv PING ACK ' anything | 'Stream ' anything | 'buffered onStreamClose for stream: ' anything
               | 'invoking onStreamClose for stream: ' anything | 'send buffer over limit ' | 'send buffer under limit '
               | 'recv buffer over limit ' | 'recv buffer under limit ' ;
filterManagerNoise : 'commonEncodePrefix end_stream: ' anything | 'closing stream' | 'setting buffer limit to ' anything
                   | 'Read-disabling downstream stream due to filter callbacks.' | 'Read-enabling downstream stream due to filter callbacks.'
                   | 'Disabling upstream stream due to downstream stream watermark.' | 'Enabling upstream stream due to downstream stream watermark.'
                   | 'converting to headers and body (body not available yet)' ;
connectionCloseNoise : 'Not closing conn, socket is not open' | 'closeSocket: socket is not open, returning'
                     | 'connection is closing through the filter manager' | 'connection is closing not through the filter manager'
                     | 'both sides are half closed or it is final close after flush state'
                     | 'connection closing type=AbortReset, setting LocalReset to the detected close type.'
                     | 'close during connected callback' | 'connected on local interface ' anything
                     | 'raising bind error' | 'raising immediate error' | 'setting delayed close timer with timeout ' anything ;
routerCleanupNoise : 'Executing cleanup(): ' anything ;
dispatcherNoise : 'running ' anything | 'destroying dispatcher ' anything | 'shutdown destroyed ' anything
                | 'clearing deferred deletion list' anything | 'item added to deferred deletion list' anything ;
workerNoise : 'worker entering dispatch loop' | 'worker exited dispatch loop' | 'TcpListener accepted ' anything
            | 'starting worker' anything | 'No overload action is configured for ' anything ;
listenerNoise : 'tls inspector: ' anything | 'http inspector: ' anything | 'original_dst: ' anything
              | 'tls:onServerName(), requestedServerName: ' anything | 'tls:onALPN(), ALPN: ' anything
              | 'closing connection from ' anything ;
watermarkNoise : 'onAboveReadBufferHighWatermark' | 'onBelowReadBufferLowWatermark'
               | 'onAboveWriteBufferHighWatermark' | 'onBelowWriteBufferLowWatermark' ;
flowControlNoise : 'request data too large watermark exceeded' | 'response data too large watermark exceeded' ;
// The rest of the async client's answer (its headers are asyncResponseHeaders): no connection or stream id.
asyncClientNoise : 'async http request response trailers:' anything | 'async http request response data (length=' anything ;
// A module calling back into the host, inside a VM call (its time is the enclosing callback's).
wasmHostCallNoise : '[vm->host] ' anything | '[vm<-host] ' anything ;

serverLifecycleNoise
    : SPACES anything | 'initializing epoch ' anything | 'statically linked extensions:' | 'HTTP header map info:'
    | 'runtime: ' anything | 'server concurrency set to ' anything | 'Starting admin HTTP server at ' anything
    | 'There is no configured limit to the number of allowed active ' anything
    | 'all clusters initialized. initializing init manager' | 'starting main dispatch loop'
    | 'main dispatch loop exited' | 'caught ' anything | 'shutting down server instance' | 'exiting'
    | 'flushing stats' | 'destroying listener manager' | 'destroyed listener manager' | 'shut down dispatcher'
    | 'destroying access logger ' anything | 'destroyed access loggers' | 'stopping listener' anything
    | 'Envoy is not fully initialized, ' anything | 'unable to rotate ' anything | 'reopening ' anything
    | 'main thread ' anything | 'enabling guard ' anything
    ;

unknownMessage : anything ;

// ---- shared pieces ----
rest : ~EOF* ;
anything : ~EOF* ;
signedInt : '-'? INT ;
headerKey : ~(' ' | TAB | ' value=')+ ;
filterName : ~(' ' | TAB | ' status=')* ;

// ---- lexer ----
TAB : '\t' ;
INT : [0-9]+ ;
HEX : '0x' [0-9a-fA-F]+ ;
SQ : '\'' ~['\n]* '\'' ;
WORD : [A-Za-z_] [A-Za-z0-9_.\-]* ;
SPACES : ' ' ' '+ ;
OTHER : . ;
