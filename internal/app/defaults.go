package app

import "github.com/envoy-rls/envoy-rls/internal/options"

// Defaults of the serve flags (options'), by the names the deployment
// tests hold the chart's and the compose file's values against.
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
	DefaultGRPCMaxConcurrentStreams         = options.DefaultGRPCMaxConcurrentStreams
	DefaultGRPCMaxConnections               = options.DefaultGRPCMaxConnections
	DefaultGRPCReceiveTimeout               = options.DefaultGRPCReceiveTimeout
	DefaultGRPCMaxIncompleteRequests        = options.DefaultGRPCMaxIncompleteRequests
	DefaultGRPCMaxRecvMsgSize               = options.DefaultGRPCMaxRecvMsgSize
	DefaultGRPCMaxConnectionIdle            = options.DefaultGRPCMaxConnectionIdle
	DefaultGRPCMaxConnectionAge             = options.DefaultGRPCMaxConnectionAge
	DefaultGRPCMaxConnectionAgeGrace        = options.DefaultGRPCMaxConnectionAgeGrace
	DefaultGRPCKeepaliveTime                = options.DefaultGRPCKeepaliveTime
	DefaultGRPCKeepaliveTimeout             = options.DefaultGRPCKeepaliveTimeout
	DefaultGRPCKeepaliveMinTime             = options.DefaultGRPCKeepaliveMinTime
	DefaultGRPCKeepalivePermitWithoutStream = options.DefaultGRPCKeepalivePermitWithoutStream
	DefaultStatsdProtocol                   = options.DefaultStatsdProtocol
	DefaultStatsdFlushInterval              = options.DefaultStatsdFlushInterval
	DefaultNearLimitRatio                   = options.DefaultNearLimitRatio
	DefaultAuditRedisStream                 = options.DefaultAuditRedisStream
	DefaultAuditRedisMaxLen                 = options.DefaultAuditRedisMaxLen
	DefaultAuditSample                      = options.DefaultAuditSample
	DefaultAuditQueueSize                   = options.DefaultAuditQueueSize
)
