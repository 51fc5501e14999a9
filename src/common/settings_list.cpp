// The list of every setting of settings.h, in its order: for
// docs/launching.md's table (a test checks every row is there) and
// `accelerate env`.
#include "common/settings.h"

namespace accelerate::settings {

const std::vector<Description>& all() {
  static const std::vector<Description> descriptions = {kMixedPrecision.about,
                                                        kGradientAccumulationSteps.about,
                                                        kUseCpu.about,
                                                        kDebugMode.about,
                                                        kTimeout.about,
                                                        kLogLevel.about,
                                                        kSharedMemoryAllReduce.about,
                                                        kOffloadOnCpuJob.about,
                                                        kProgressTty.about,
                                                        kRestartCount.about,
                                                        kOmpNumThreads.about,
                                                        kOpenblasNumThreads.about,
                                                        kOmpWaitPolicy.about,
                                                        kOpenblasThreadTimeout.about,
                                                        kOpenblasCoretype.about,
                                                        kCpuCapability.about,
                                                        kUseDeepSpeed.about,
                                                        kZeroStage.about,
                                                        kDeepSpeedConfigFile.about,
                                                        kGradientClipping.about,
                                                        kOffloadOptimizerDevice.about,
                                                        kOffloadParamDevice.about,
                                                        kZero3Init.about,
                                                        kZero3Save16BitModel.about,
                                                        kUseFsdp.about,
                                                        kFsdpShardingStrategy.about,
                                                        kFsdpReshardAfterForward.about,
                                                        kFsdpVersion.about,
                                                        kFsdpAutoWrapPolicy.about,
                                                        kFsdpTransformerClsToWrap.about,
                                                        kFsdpMinNumParams.about,
                                                        kFsdpBackwardPrefetch.about,
                                                        kFsdpForwardPrefetch.about,
                                                        kFsdpOffloadParams.about,
                                                        kFsdpStateDictType.about,
                                                        kFsdpCpuRamEfficientLoading.about,
                                                        kFsdpSyncModuleStates.about,
                                                        kUseParallelismConfig.about,
                                                        kParallelismDpReplicateSize.about,
                                                        kParallelismDpShardSize.about,
                                                        kParallelismSpSize.about,
                                                        kParallelismSpBackend.about,
                                                        kParallelismTpSize.about,
                                                        kParallelismTpSequenceParallel.about,
                                                        kParallelismCpSize.about};
  return descriptions;
}

}  // namespace accelerate::settings
