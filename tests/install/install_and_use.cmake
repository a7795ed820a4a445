# Runs as `cmake -P`: install, build a consumer against the install, run it.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BUILD} -DCMAKE_PREFIX_PATH=${PREFIX}
    -DEXAMPLE_SOURCE=${EXAMPLE_SOURCE} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${CONSUMER_BUILD})
run(${PYTHON} ${MODEL_SCRIPT} --output ${CONSUMER_BUILD}/model.onnx --input-npy ${CONSUMER_BUILD}/input.npy)
run(${PREFIX}/bin/tessera compile ${CONSUMER_BUILD}/model.onnx -o ${CONSUMER_BUILD}/model.tess -q)
run(${CONSUMER_BUILD}/classify_image ${CONSUMER_BUILD}/model.tess 2)
