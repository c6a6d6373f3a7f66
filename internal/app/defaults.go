package app

import (
	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
	"github.com/envoy-rls/envoy-rls/internal/options"
)

// Defaults of the serve flags (options' and grpcserve's), by the names the
// deployment tests hold the chart's and the compose file's values against.
const (
	DefaultGRPCAddr                         = options.DefaultGRPCAddr
	DefaultAdminAddr                        = options.DefaultAdminAddr
	DefaultStore                            = options.DefaultStore
	DefaultLogLevel                         = options.DefaultLogLevel
	DefaultHeaders                          = options.DefaultHeaders
	DefaultDrainTimeout                     = options.DefaultDrainTimeout
	DefaultReadiness                        = options.DefaultReadiness
	DefaultFailureMode                      = options.DefaultFailureMode
	DefaultLocalFallbackMaxEntries          = options.DefaultLocalFallbackMaxEntries
	DefaultRedisMode                        = options.DefaultRedisMode
	DefaultRedisTimeout                     = options.DefaultRedisTimeout
	DefaultRedisPoolSize                    = options.DefaultRedisPoolSize
	DefaultRedisGroupKeys                   = options.DefaultRedisGroupKeys
	DefaultRedisInFlight                    = options.DefaultRedisInFlight
	DefaultGRPCMaxConcurrentStreams         = grpcserve.DefaultMaxConcurrentStreams
	DefaultGRPCMaxConnections               = grpcserve.DefaultMaxConnections
	DefaultGRPCReceiveTimeout               = grpcserve.DefaultReceiveTimeout
	DefaultGRPCMaxIncompleteRequests        = grpcserve.DefaultMaxIncompleteRequests
	DefaultGRPCMaxRecvMsgSize               = grpcserve.DefaultMaxRecvMsgSize
	DefaultGRPCMaxConnectionIdle            = grpcserve.DefaultMaxConnectionIdle
	DefaultGRPCMaxConnectionAge             = grpcserve.DefaultMaxConnectionAge
	DefaultGRPCMaxConnectionAgeGrace        = grpcserve.DefaultMaxConnectionAgeGrace
	DefaultGRPCKeepaliveTime                = grpcserve.DefaultKeepaliveTime
	DefaultGRPCKeepaliveTimeout             = grpcserve.DefaultKeepaliveTimeout
	DefaultGRPCKeepaliveMinTime             = grpcserve.DefaultKeepaliveMinTime
	DefaultGRPCKeepalivePermitWithoutStream = grpcserve.DefaultKeepalivePermitWithoutStream
	DefaultStatsdProtocol                   = options.DefaultStatsdProtocol
	DefaultStatsdFlushInterval              = options.DefaultStatsdFlushInterval
	DefaultNearLimitRatio                   = options.DefaultNearLimitRatio
	DefaultAuditRedisStream                 = options.DefaultAuditRedisStream
	DefaultAuditRedisMaxLen                 = options.DefaultAuditRedisMaxLen
	DefaultAuditSample                      = options.DefaultAuditSample
	DefaultAuditQueueSize                   = options.DefaultAuditQueueSize
)
