# Generated from EnvoyLog.g4 by ANTLR 4.13.2
from antlr4 import *
if "." in __name__:
    from .EnvoyLogParser import EnvoyLogParser
else:
    from EnvoyLogParser import EnvoyLogParser

# This class defines a complete generic visitor for a parse tree produced by EnvoyLogParser.

class EnvoyLogVisitor(ParseTreeVisitor):

    # Visit a parse tree produced by EnvoyLogParser#line.
    def visitLine(self, ctx:EnvoyLogParser.LineContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#logger.
    def visitLogger(self, ctx:EnvoyLogParser.LoggerContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#quietLogger.
    def visitQuietLogger(self, ctx:EnvoyLogParser.QuietLoggerContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#prefix.
    def visitPrefix(self, ctx:EnvoyLogParser.PrefixContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#known.
    def visitKnown(self, ctx:EnvoyLogParser.KnownContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#lifecycle.
    def visitLifecycle(self, ctx:EnvoyLogParser.LifecycleContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#socketEvent.
    def visitSocketEvent(self, ctx:EnvoyLogParser.SocketEventContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#readReady.
    def visitReadReady(self, ctx:EnvoyLogParser.ReadReadyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#writeReady.
    def visitWriteReady(self, ctx:EnvoyLogParser.WriteReadyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#writingBytes.
    def visitWritingBytes(self, ctx:EnvoyLogParser.WritingBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#writeFlushComplete.
    def visitWriteFlushComplete(self, ctx:EnvoyLogParser.WriteFlushCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#readDisable.
    def visitReadDisable(self, ctx:EnvoyLogParser.ReadDisableContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#raisingConnectionEvent.
    def visitRaisingConnectionEvent(self, ctx:EnvoyLogParser.RaisingConnectionEventContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#remoteClose.
    def visitRemoteClose(self, ctx:EnvoyLogParser.RemoteCloseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#remoteEarlyClose.
    def visitRemoteEarlyClose(self, ctx:EnvoyLogParser.RemoteEarlyCloseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#closingConnection.
    def visitClosingConnection(self, ctx:EnvoyLogParser.ClosingConnectionContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#closingSocket.
    def visitClosingSocket(self, ctx:EnvoyLogParser.ClosingSocketContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connectingTo.
    def visitConnectingTo(self, ctx:EnvoyLogParser.ConnectingToContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connectionInProgress.
    def visitConnectionInProgress(self, ctx:EnvoyLogParser.ConnectionInProgressContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connected.
    def visitConnected(self, ctx:EnvoyLogParser.ConnectedContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connectError.
    def visitConnectError(self, ctx:EnvoyLogParser.ConnectErrorContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#currentConnectingState.
    def visitCurrentConnectingState(self, ctx:EnvoyLogParser.CurrentConnectingStateContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#readReturns.
    def visitReadReturns(self, ctx:EnvoyLogParser.ReadReturnsContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#readError.
    def visitReadError(self, ctx:EnvoyLogParser.ReadErrorContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#writeReturns.
    def visitWriteReturns(self, ctx:EnvoyLogParser.WriteReturnsContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#writeError.
    def visitWriteError(self, ctx:EnvoyLogParser.WriteErrorContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sslReadReturns.
    def visitSslReadReturns(self, ctx:EnvoyLogParser.SslReadReturnsContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sslReadBytes.
    def visitSslReadBytes(self, ctx:EnvoyLogParser.SslReadBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sslWriteReturns.
    def visitSslWriteReturns(self, ctx:EnvoyLogParser.SslWriteReturnsContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sslErrorWhileRead.
    def visitSslErrorWhileRead(self, ctx:EnvoyLogParser.SslErrorWhileReadContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sslErrorWhileWrite.
    def visitSslErrorWhileWrite(self, ctx:EnvoyLogParser.SslErrorWhileWriteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sslShutdown.
    def visitSslShutdown(self, ctx:EnvoyLogParser.SslShutdownContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#tlsFailure.
    def visitTlsFailure(self, ctx:EnvoyLogParser.TlsFailureContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#tlsHandshakeStep.
    def visitTlsHandshakeStep(self, ctx:EnvoyLogParser.TlsHandshakeStepContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#tlsHandshakeComplete.
    def visitTlsHandshakeComplete(self, ctx:EnvoyLogParser.TlsHandshakeCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#rstClose.
    def visitRstClose(self, ctx:EnvoyLogParser.RstCloseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#newConnection.
    def visitNewConnection(self, ctx:EnvoyLogParser.NewConnectionContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connectionOnEvent.
    def visitConnectionOnEvent(self, ctx:EnvoyLogParser.ConnectionOnEventContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#addingToCleanupList.
    def visitAddingToCleanupList(self, ctx:EnvoyLogParser.AddingToCleanupListContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#parsingBytes.
    def visitParsingBytes(self, ctx:EnvoyLogParser.ParsingBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#parsedBytes.
    def visitParsedBytes(self, ctx:EnvoyLogParser.ParsedBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#messageBegin.
    def visitMessageBegin(self, ctx:EnvoyLogParser.MessageBeginContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#completedHeader.
    def visitCompletedHeader(self, ctx:EnvoyLogParser.CompletedHeaderContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#onHeadersComplete.
    def visitOnHeadersComplete(self, ctx:EnvoyLogParser.OnHeadersCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#serverOnHeadersComplete.
    def visitServerOnHeadersComplete(self, ctx:EnvoyLogParser.ServerOnHeadersCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#clientOnHeadersComplete.
    def visitClientOnHeadersComplete(self, ctx:EnvoyLogParser.ClientOnHeadersCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#statusCode.
    def visitStatusCode(self, ctx:EnvoyLogParser.StatusCodeContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#bodySize.
    def visitBodySize(self, ctx:EnvoyLogParser.BodySizeContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#messageComplete.
    def visitMessageComplete(self, ctx:EnvoyLogParser.MessageCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#directDispatchedBytes.
    def visitDirectDispatchedBytes(self, ctx:EnvoyLogParser.DirectDispatchedBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2DispatchingBytes.
    def visitH2DispatchingBytes(self, ctx:EnvoyLogParser.H2DispatchingBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2DispatchedBytes.
    def visitH2DispatchedBytes(self, ctx:EnvoyLogParser.H2DispatchedBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2AboutToRecvFrame.
    def visitH2AboutToRecvFrame(self, ctx:EnvoyLogParser.H2AboutToRecvFrameContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2TrackInboundFrame.
    def visitH2TrackInboundFrame(self, ctx:EnvoyLogParser.H2TrackInboundFrameContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2RecvFrame.
    def visitH2RecvFrame(self, ctx:EnvoyLogParser.H2RecvFrameContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2VisitorFrameHeader.
    def visitH2VisitorFrameHeader(self, ctx:EnvoyLogParser.H2VisitorFrameHeaderContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2VisitorEndHeaders.
    def visitH2VisitorEndHeaders(self, ctx:EnvoyLogParser.H2VisitorEndHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2VisitorBeginData.
    def visitH2VisitorBeginData(self, ctx:EnvoyLogParser.H2VisitorBeginDataContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2VisitorEndStream.
    def visitH2VisitorEndStream(self, ctx:EnvoyLogParser.H2VisitorEndStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2AboutToSendFrame.
    def visitH2AboutToSendFrame(self, ctx:EnvoyLogParser.H2AboutToSendFrameContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2SentFrame.
    def visitH2SentFrame(self, ctx:EnvoyLogParser.H2SentFrameContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2SendData.
    def visitH2SendData(self, ctx:EnvoyLogParser.H2SendDataContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2StreamClosed.
    def visitH2StreamClosed(self, ctx:EnvoyLogParser.H2StreamClosedContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2RemoteReset.
    def visitH2RemoteReset(self, ctx:EnvoyLogParser.H2RemoteResetContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2SentReset.
    def visitH2SentReset(self, ctx:EnvoyLogParser.H2SentResetContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2SentGoaway.
    def visitH2SentGoaway(self, ctx:EnvoyLogParser.H2SentGoawayContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#newStream.
    def visitNewStream(self, ctx:EnvoyLogParser.NewStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#requestHeadersComplete.
    def visitRequestHeadersComplete(self, ctx:EnvoyLogParser.RequestHeadersCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#requestEndStream.
    def visitRequestEndStream(self, ctx:EnvoyLogParser.RequestEndStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#requestTrailersComplete.
    def visitRequestTrailersComplete(self, ctx:EnvoyLogParser.RequestTrailersCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encodingHeaders.
    def visitEncodingHeaders(self, ctx:EnvoyLogParser.EncodingHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encodingData.
    def visitEncodingData(self, ctx:EnvoyLogParser.EncodingDataContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encodingTrailers.
    def visitEncodingTrailers(self, ctx:EnvoyLogParser.EncodingTrailersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encoding1xxHeaders.
    def visitEncoding1xxHeaders(self, ctx:EnvoyLogParser.Encoding1xxHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#streamReset.
    def visitStreamReset(self, ctx:EnvoyLogParser.StreamResetContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#doEndStreamReset.
    def visitDoEndStreamReset(self, ctx:EnvoyLogParser.DoEndStreamResetContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#codecCompletedEncoding.
    def visitCodecCompletedEncoding(self, ctx:EnvoyLogParser.CodecCompletedEncodingContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connectionCloseHeader.
    def visitConnectionCloseHeader(self, ctx:EnvoyLogParser.ConnectionCloseHeaderContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#drainClosing.
    def visitDrainClosing(self, ctx:EnvoyLogParser.DrainClosingContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#idleTimeout.
    def visitIdleTimeout(self, ctx:EnvoyLogParser.IdleTimeoutContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#maxRequestsPerConnection.
    def visitMaxRequestsPerConnection(self, ctx:EnvoyLogParser.MaxRequestsPerConnectionContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#dispatchError.
    def visitDispatchError(self, ctx:EnvoyLogParser.DispatchErrorContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#decodeHeadersCalled.
    def visitDecodeHeadersCalled(self, ctx:EnvoyLogParser.DecodeHeadersCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#decodeDataCalled.
    def visitDecodeDataCalled(self, ctx:EnvoyLogParser.DecodeDataCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#decodeTrailersCalled.
    def visitDecodeTrailersCalled(self, ctx:EnvoyLogParser.DecodeTrailersCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encodeHeadersCalled.
    def visitEncodeHeadersCalled(self, ctx:EnvoyLogParser.EncodeHeadersCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encodeDataCalled.
    def visitEncodeDataCalled(self, ctx:EnvoyLogParser.EncodeDataCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encodeTrailersCalled.
    def visitEncodeTrailersCalled(self, ctx:EnvoyLogParser.EncodeTrailersCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#encode1xxHeadersCalled.
    def visitEncode1xxHeadersCalled(self, ctx:EnvoyLogParser.Encode1xxHeadersCalledContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#continuingFilterChain.
    def visitContinuingFilterChain(self, ctx:EnvoyLogParser.ContinuingFilterChainContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#filterIterationAborted.
    def visitFilterIterationAborted(self, ctx:EnvoyLogParser.FilterIterationAbortedContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#localReply.
    def visitLocalReply(self, ctx:EnvoyLogParser.LocalReplyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#preparingLocalReply.
    def visitPreparingLocalReply(self, ctx:EnvoyLogParser.PreparingLocalReplyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#executingLocalReply.
    def visitExecutingLocalReply(self, ctx:EnvoyLogParser.ExecutingLocalReplyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#adminRequestComplete.
    def visitAdminRequestComplete(self, ctx:EnvoyLogParser.AdminRequestCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#routeMatch.
    def visitRouteMatch(self, ctx:EnvoyLogParser.RouteMatchContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#noRouteMatch.
    def visitNoRouteMatch(self, ctx:EnvoyLogParser.NoRouteMatchContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#unknownCluster.
    def visitUnknownCluster(self, ctx:EnvoyLogParser.UnknownClusterContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#routerDecodingHeaders.
    def visitRouterDecodingHeaders(self, ctx:EnvoyLogParser.RouterDecodingHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#routerDecodingTrailers.
    def visitRouterDecodingTrailers(self, ctx:EnvoyLogParser.RouterDecodingTrailersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#upstreamHeadersComplete.
    def visitUpstreamHeadersComplete(self, ctx:EnvoyLogParser.UpstreamHeadersCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#upstream1xx.
    def visitUpstream1xx(self, ctx:EnvoyLogParser.Upstream1xxContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#upstreamTimeout.
    def visitUpstreamTimeout(self, ctx:EnvoyLogParser.UpstreamTimeoutContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#upstreamReset.
    def visitUpstreamReset(self, ctx:EnvoyLogParser.UpstreamResetContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#performingRetry.
    def visitPerformingRetry(self, ctx:EnvoyLogParser.PerformingRetryContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolReady.
    def visitPoolReady(self, ctx:EnvoyLogParser.PoolReadyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#attachedUpstreamConnection.
    def visitAttachedUpstreamConnection(self, ctx:EnvoyLogParser.AttachedUpstreamConnectionContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#upstreamResponseHeaders.
    def visitUpstreamResponseHeaders(self, ctx:EnvoyLogParser.UpstreamResponseHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#upstreamResponseTrailers.
    def visitUpstreamResponseTrailers(self, ctx:EnvoyLogParser.UpstreamResponseTrailersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#perTryTimeout.
    def visitPerTryTimeout(self, ctx:EnvoyLogParser.PerTryTimeoutContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#cancelPoolRequest.
    def visitCancelPoolRequest(self, ctx:EnvoyLogParser.CancelPoolRequestContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#proxyingHeaders.
    def visitProxyingHeaders(self, ctx:EnvoyLogParser.ProxyingHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#proxyingBytes.
    def visitProxyingBytes(self, ctx:EnvoyLogParser.ProxyingBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#proxyingTrailers.
    def visitProxyingTrailers(self, ctx:EnvoyLogParser.ProxyingTrailersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#bufferingBytes.
    def visitBufferingBytes(self, ctx:EnvoyLogParser.BufferingBytesContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolUsingExisting.
    def visitPoolUsingExisting(self, ctx:EnvoyLogParser.PoolUsingExistingContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolCreatingStream.
    def visitPoolCreatingStream(self, ctx:EnvoyLogParser.PoolCreatingStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolTryingNewConnection.
    def visitPoolTryingNewConnection(self, ctx:EnvoyLogParser.PoolTryingNewConnectionContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolCreatingConnection.
    def visitPoolCreatingConnection(self, ctx:EnvoyLogParser.PoolCreatingConnectionContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolQueueingStream.
    def visitPoolQueueingStream(self, ctx:EnvoyLogParser.PoolQueueingStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolAttachingToNextStream.
    def visitPoolAttachingToNextStream(self, ctx:EnvoyLogParser.PoolAttachingToNextStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolDestroyingStream.
    def visitPoolDestroyingStream(self, ctx:EnvoyLogParser.PoolDestroyingStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolClientDisconnected.
    def visitPoolClientDisconnected(self, ctx:EnvoyLogParser.PoolClientDisconnectedContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolConnectTimeout.
    def visitPoolConnectTimeout(self, ctx:EnvoyLogParser.PoolConnectTimeoutContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolOverflow.
    def visitPoolOverflow(self, ctx:EnvoyLogParser.PoolOverflowContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolCancellingStream.
    def visitPoolCancellingStream(self, ctx:EnvoyLogParser.PoolCancellingStreamContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#sawUpstreamClose.
    def visitSawUpstreamClose(self, ctx:EnvoyLogParser.SawUpstreamCloseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#responseComplete.
    def visitResponseComplete(self, ctx:EnvoyLogParser.ResponseCompleteContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#clientConnecting.
    def visitClientConnecting(self, ctx:EnvoyLogParser.ClientConnectingContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#clientDisconnect.
    def visitClientDisconnect(self, ctx:EnvoyLogParser.ClientDisconnectContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#clientRequestReset.
    def visitClientRequestReset(self, ctx:EnvoyLogParser.ClientRequestResetContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#deferredDeleteAdded.
    def visitDeferredDeleteAdded(self, ctx:EnvoyLogParser.DeferredDeleteAddedContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#deferredDeleteCleared.
    def visitDeferredDeleteCleared(self, ctx:EnvoyLogParser.DeferredDeleteClearedContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#noHealthyHost.
    def visitNoHealthyHost(self, ctx:EnvoyLogParser.NoHealthyHostContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#wasmLog.
    def visitWasmLog(self, ctx:EnvoyLogParser.WasmLogContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#celError.
    def visitCelError(self, ctx:EnvoyLogParser.CelErrorContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#luaLog.
    def visitLuaLog(self, ctx:EnvoyLogParser.LuaLogContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#wasmVmEnter.
    def visitWasmVmEnter(self, ctx:EnvoyLogParser.WasmVmEnterContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#wasmVmExit.
    def visitWasmVmExit(self, ctx:EnvoyLogParser.WasmVmExitContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#healthCheckResult.
    def visitHealthCheckResult(self, ctx:EnvoyLogParser.HealthCheckResultContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#healthCheckFailure.
    def visitHealthCheckFailure(self, ctx:EnvoyLogParser.HealthCheckFailureContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#asyncResponseHeaders.
    def visitAsyncResponseHeaders(self, ctx:EnvoyLogParser.AsyncResponseHeadersContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#extAuthzCalling.
    def visitExtAuthzCalling(self, ctx:EnvoyLogParser.ExtAuthzCallingContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#noise.
    def visitNoise(self, ctx:EnvoyLogParser.NoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#timerNoise.
    def visitTimerNoise(self, ctx:EnvoyLogParser.TimerNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#loadShedNoise.
    def visitLoadShedNoise(self, ctx:EnvoyLogParser.LoadShedNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolStateNoise.
    def visitPoolStateNoise(self, ctx:EnvoyLogParser.PoolStateNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#poolPreconnectNoise.
    def visitPoolPreconnectNoise(self, ctx:EnvoyLogParser.PoolPreconnectNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#codecClientNoise.
    def visitCodecClientNoise(self, ctx:EnvoyLogParser.CodecClientNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#h2SessionNoise.
    def visitH2SessionNoise(self, ctx:EnvoyLogParser.H2SessionNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#filterManagerNoise.
    def visitFilterManagerNoise(self, ctx:EnvoyLogParser.FilterManagerNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#connectionCloseNoise.
    def visitConnectionCloseNoise(self, ctx:EnvoyLogParser.ConnectionCloseNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#routerCleanupNoise.
    def visitRouterCleanupNoise(self, ctx:EnvoyLogParser.RouterCleanupNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#dispatcherNoise.
    def visitDispatcherNoise(self, ctx:EnvoyLogParser.DispatcherNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#workerNoise.
    def visitWorkerNoise(self, ctx:EnvoyLogParser.WorkerNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#listenerNoise.
    def visitListenerNoise(self, ctx:EnvoyLogParser.ListenerNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#watermarkNoise.
    def visitWatermarkNoise(self, ctx:EnvoyLogParser.WatermarkNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#flowControlNoise.
    def visitFlowControlNoise(self, ctx:EnvoyLogParser.FlowControlNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#asyncClientNoise.
    def visitAsyncClientNoise(self, ctx:EnvoyLogParser.AsyncClientNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#wasmHostCallNoise.
    def visitWasmHostCallNoise(self, ctx:EnvoyLogParser.WasmHostCallNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#serverLifecycleNoise.
    def visitServerLifecycleNoise(self, ctx:EnvoyLogParser.ServerLifecycleNoiseContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#unknownMessage.
    def visitUnknownMessage(self, ctx:EnvoyLogParser.UnknownMessageContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#rest.
    def visitRest(self, ctx:EnvoyLogParser.RestContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#anything.
    def visitAnything(self, ctx:EnvoyLogParser.AnythingContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#signedInt.
    def visitSignedInt(self, ctx:EnvoyLogParser.SignedIntContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#headerKey.
    def visitHeaderKey(self, ctx:EnvoyLogParser.HeaderKeyContext):
        return self.visitChildren(ctx)


    # Visit a parse tree produced by EnvoyLogParser#filterName.
    def visitFilterName(self, ctx:EnvoyLogParser.FilterNameContext):
        return self.visitChildren(ctx)



del EnvoyLogParser