// accelerate-cpp: Hugging Face Accelerate's training-loop API for LibTorch.
// Include this one header.
#pragma once

#include "accelerate/accelerator.h"
#include "accelerate/batch_sharding.h"
#include "accelerate/collectives.h"
#include "accelerate/communicator.h"
#include "accelerate/data_loader.h"
#include "accelerate/dataset.h"
#include "accelerate/environment.h"
#include "accelerate/errors.h"
#include "accelerate/gradient_reducer.h"
#include "accelerate/gradient_state.h"
#include "accelerate/job_state.h"
#include "accelerate/memory.h"
#include "accelerate/mnist.h"
#include "accelerate/object_serializer.h"
#include "accelerate/optimizer.h"
#include "accelerate/process_control.h"
#include "accelerate/random.h"
#include "accelerate/scheduler.h"
#include "accelerate/version.h"
